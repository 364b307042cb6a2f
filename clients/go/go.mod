module github.com/delayq/delayq/clients/go

go 1.19
