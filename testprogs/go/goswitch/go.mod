module goswitch

go 1.16
