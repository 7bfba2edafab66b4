module github.com/dlockgo/dlock/interop

go 1.26.0

replace github.com/dlockgo/dlock => ../
