Boutput_0Jx¤m?II@¤é?&Vi@/K­@Ì9ç?—/@<sŠ@Àd*@i’@P0h@ÄÛ`@Èo,@IÜ?DL\¿Hş«@DY˜?RÁ?Hmy@m4ë?É·»@Sş? É­¿ˆsM@7õm@¬
»@jAœ@Éş?DÑ©@Fs©@