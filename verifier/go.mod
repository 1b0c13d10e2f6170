module sealtrace.dev/sealverify

go 1.19
