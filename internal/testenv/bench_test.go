package testenv_test

import (
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// BenchmarkStartPostgres measures a server start from the cached template cluster (the default)
// and from a fresh initdb, each to the point where the default database accepts connections.
func BenchmarkStartPostgres(b *testing.B) {
	for _, c := range []struct{ name, template string }{{"template", ""}, {"initdb", "off"}} {
		b.Run(c.name, func(b *testing.B) {
			b.Setenv(testenv.EnvPGTemplate, c.template)
			for b.Loop() {
				p, err := testenv.NewPostgres()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkStartRedis measures a plain Redis start and a master + replica + 3 Sentinels start
// (until every Sentinel knows the replica and the other Sentinels).
func BenchmarkStartRedis(b *testing.B) {
	for _, c := range []struct {
		name string
		opts testenv.RedisOptions
	}{
		{"plain", testenv.RedisOptions{}},
		{"sentinel", testenv.RedisOptions{Replicas: 1, Sentinels: 3}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g, err := testenv.NewRedis(c.opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := g.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
