module github.com/switchyard/switchyard

go 1.26.8

require (
	github.com/VictoriaMetrics/metrics v1.45.0 // indirect
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/asynkron/protoactor-go v0.0.0-20240822202345-3c0e61ca19c9 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.79.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
