BlogitsJÏõ@>mcT>+Š&>fÚœ>Óg
>