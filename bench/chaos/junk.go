package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// junkCase is one invalid registration.
type junkCase struct {
	name string
	// body renders the registration for backend id (the path's id).
	body func(id string) []byte
	// want are the acceptable statuses.
	want []int
}

// validRegistration is a registration the gateway would accept for id, as a map that
// the junk cases spoil one field at a time.
func validRegistration(id string) map[string]any {
	return map[string]any{
		"inference_server_id":  id,
		"inference_server_url": "http://127.0.0.1:9",
		"models": map[string]any{
			"junk-model": map[string]any{
				"status": "ACTIVE",
				"stats":  map[string]any{"last_mean_input_tps": 1000.0, "output_tps": 100.0, "max_engine_concurrency": 8},
			},
		},
	}
}

func marshal(v any) []byte {
	b, _ := json.Marshal(v) //nolint:errchkjson // maps of plain values
	return b
}

// spoil returns a case that changes one thing of a valid registration.
func spoil(name string, change func(reg map[string]any, id string)) junkCase {
	return junkCase{name: name, want: []int{JunkStatus}, body: func(id string) []byte {
		reg := validRegistration(id)
		change(reg, id)
		return marshal(reg)
	}}
}

func stats(reg map[string]any) map[string]any {
	return reg["models"].(map[string]any)["junk-model"].(map[string]any)["stats"].(map[string]any) //nolint:forcetypeassert // built above
}

func manyModels(n int) map[string]any {
	models := make(map[string]any, n)
	for i := range n {
		models["junk-model-"+strconv.Itoa(i)] = map[string]any{"status": "ACTIVE", "stats": map[string]any{}}
	}
	return models
}

// junkCases are the invalid registrations sent to the admin listener: broken JSON,
// absurd values and huge model counts. Each must be refused whole.
func junkCases() []junkCase {
	return []junkCase{
		{name: "broken JSON", want: []int{JunkStatus}, body: func(id string) []byte { return []byte(`{"inference_server_id":"` + id + `","models":{`) }},
		{name: "trailing data", want: []int{JunkStatus}, body: func(id string) []byte { return append(marshal(validRegistration(id)), "{}"...) }},
		spoil("unknown field", func(reg map[string]any, _ string) { reg["surprise"] = true }),
		spoil("id differs from the path", func(reg map[string]any, id string) { reg["inference_server_id"] = id + "-other" }),
		spoil("url not http", func(reg map[string]any, _ string) { reg["inference_server_url"] = "gopher://nowhere" }),
		spoil("heartbeat_ms 10^15", func(reg map[string]any, _ string) { reg["heartbeat_ms"] = uint64(1e15) }),
		spoil("negative throughput", func(reg map[string]any, _ string) { stats(reg)["last_mean_input_tps"] = -1e300 }),
		spoil("max_engine_concurrency 10^15", func(reg map[string]any, _ string) { stats(reg)["max_engine_concurrency"] = uint64(1e15) }),
		spoil("queue estimate 10^15 ms", func(reg map[string]any, _ string) {
			stats(reg)["queue_time_estimate_ms_by_priority"] = map[string]any{"0": uint64(1e15)}
		}),
		spoil("unknown model status", func(reg map[string]any, _ string) {
			reg["models"].(map[string]any)["junk-model"].(map[string]any)["status"] = "ON_FIRE" //nolint:forcetypeassert // built above
		}),
		spoil("control characters in a model name", func(reg map[string]any, _ string) {
			reg["models"] = map[string]any{"junk\x00\x1b[2J": map[string]any{"status": "ACTIVE", "stats": map[string]any{}}}
		}),
		spoil("10 KiB model name", func(reg map[string]any, _ string) {
			reg["models"] = map[string]any{strings.Repeat("m", 10<<10): map[string]any{"status": "ACTIVE", "stats": map[string]any{}}}
		}),
		spoil("300 models", func(reg map[string]any, _ string) { reg["models"] = manyModels(300) }),
		// Over the admin listener's body limit: refused before or while parsing.
		{name: "100 000 models", want: []int{JunkStatus, JunkOversizeStatus}, body: func(id string) []byte {
			reg := validRegistration(id)
			reg["models"] = manyModels(100_000)
			return marshal(reg)
		}},
	}
}

// junkLongID is sent with an id over the 128-byte id limit, in the path and the body.
var junkLongID = strings.Repeat("j", 1000)

// sendJunk PUTs every junk case rounds times (and a registration with an over-long id),
// each under a fresh backend id, four at a time, and returns each answer: the status
// when acceptable, else "<case>: <status or error>".
func sendJunk(ctx context.Context, f *Fleet, rounds int) []string {
	type job struct {
		name string
		id   string
		body []byte
		want []int
	}
	cases := junkCases()
	jobs := make([]job, 0, (len(cases)+1)*rounds)
	for r := range rounds {
		for i, c := range cases {
			id := "junk-" + strconv.Itoa(i) + "-" + strconv.Itoa(r)
			jobs = append(jobs, job{name: c.name, id: id, body: c.body(id), want: c.want})
		}
		jobs = append(jobs, job{name: "1000-byte id", id: junkLongID + strconv.Itoa(r), body: marshal(validRegistration(junkLongID + strconv.Itoa(r))), want: []int{JunkStatus}})
	}
	answers := make([]string, len(jobs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range work {
				j := jobs[i]
				a := sendPlain(ctx, hostPort(f.AdminURL), http.MethodPut, "/control/v1/backends/"+j.id, j.body, 10*time.Second)
				if status, err := strconv.Atoi(a.Answer); err == nil && slices.Contains(j.want, status) {
					answers[i] = a.Answer
				} else {
					answers[i] = j.name + ": " + a.Answer
				}
			}
		})
	}
	for i := range jobs {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	out := answers[:0]
	for _, a := range answers {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}
