package gateway

import "testing"

func TestPromptContent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ body, want string }{
		{`{"temperature":0.7,"model":"m","messages":[{"role":"user","content":"hi"}]}`, `"messages":[{"role":"user","content":"hi"}]}`},
		{`{"model":"m","prompt":"once upon","max_tokens":3}`, `"prompt":"once upon","max_tokens":3}`},
		{`{"model":"m","input":"x","messages":[]}`, `"input":"x","messages":[]}`},
		{`{"model":"m"}`, `{"model":"m"}`},
		{``, ``},
	} {
		if got := string(promptContent([]byte(tt.body))); got != tt.want {
			t.Errorf("promptContent(%s) = %s, want %s", tt.body, got, tt.want)
		}
	}
}
