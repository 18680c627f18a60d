module github.com/sluice-rtm/sluice

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/hashicorp/memberlist v0.7.0
	github.com/klauspost/compress v1.20.4
	github.com/panjf2000/gnet/v2 v2.9.7
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/go-metrics v0.7.0 // indirect
	github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/hashicorp/go-sockaddr v1.0.7 // indirect
	github.com/hashicorp/golang-lru v1.0.2 // indirect
	github.com/miekg/dns v1.1.73 // indirect
	github.com/sean-/seed v0.0.0-20170313163322-e2103e2c3529 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/net v0.57.0 // indirect
)

require (
	github.com/panjf2000/ants/v2 v2.11.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
