// Package chaos is the bench tool's fault suite (bench chaos) and soak run (bench soak).
//
// Both start a small local fleet of the real binaries — two mock engines, two pylons and
// one gateway, every one a child process listening on a free 127.0.0.1 port — send it a
// steady load of new chat completions, inject faults (kill -9, SIGSTOP, a gateway
// restart, slow or oversized requests, junk registrations, cancelled and broken streams)
// and compare what the clients saw with budgets: the named constants in budget.go.
//
// Only loopback traffic is sent. Every loop is bounded in count and in time, and every
// child is stopped when its scenario ends, when a scenario fails and when the run is
// cancelled (Ctrl-C).
//
// The pure parts — outcome accounting (ledger.go), budget evaluation (budget.go), the
// /metrics and /proc readers and the table (table.go) — have unit tests; the scenarios
// themselves are exercised end to end by the --short smoke test.
package chaos
