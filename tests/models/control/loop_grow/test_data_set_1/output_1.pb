B
last_finalJÖ¯@ÉÙ@äB¤>`@¤ž€?JV?