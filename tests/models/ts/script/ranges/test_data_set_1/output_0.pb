Boutput_0J'T÷À™
ÁD@÷¿