Boutput_0JêÖ?
kRA)a–?J3Azô?
|A