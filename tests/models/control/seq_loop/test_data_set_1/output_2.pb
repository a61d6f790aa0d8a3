B
last_chunkJ“n¿Je?²¤¿¿0?øÅÜ½,î)À