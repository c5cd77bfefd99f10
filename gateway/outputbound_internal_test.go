package gateway

import "testing"

func TestMaxOutputTokens(t *testing.T) {
	for _, c := range []struct {
		body string
		want uint64
	}{
		{`{"model":"m","max_tokens":256,"messages":[]}`, 256},
		{`{"max_completion_tokens" : 12 ,"max_tokens":30}`, 12},                // the least bound
		{`{"input":"x","max_output_tokens":` + "\n" + `7}`, 7},                 // responses API, white space
		{`{"messages":[{"role":"user","content":"say \"max_tokens\":5"}]}`, 0}, // inside a string
		{`{"max_tokens":null,"max_completion_tokens":"9"}`, 0},                 // not a number
		{`{"max_tokens":1.5}`, 0},
		{`{"max_tokens":0}`, 0},
		{`{"tools":[{"parameters":{"properties":{"max_tokens":{"type":"integer"}}}}],"max_tokens":40}`, 40},
		{`{"max_tokens":99999999999999999999999}`, 1 << 32}, // saturates
		{`{"max_tokens":`, 0},
		{`{"model":"m"}`, 0},
	} {
		if got := maxOutputTokens([]byte(c.body)); got != c.want {
			t.Errorf("maxOutputTokens(%s) = %d, want %d", c.body, got, c.want)
		}
	}
}

func FuzzMaxOutputTokens(f *testing.F) {
	f.Add([]byte(`{"max_tokens":256}`))
	f.Add([]byte(`{"max_completion_tokens" :`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if got := maxOutputTokens(body); got > 1<<32 {
			t.Errorf("maxOutputTokens(%q) = %d, beyond the saturation bound", body, got)
		}
	})
}
