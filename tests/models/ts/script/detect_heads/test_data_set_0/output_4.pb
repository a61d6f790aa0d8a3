Boutput_4J !¥v?ÑÃ^Aè_%AxB¯A/.A&
Š@Vv”AÛVvA