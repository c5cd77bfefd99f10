package gateway

import (
	"bytes"
	"testing"
)

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

// conversationHash is the same for every turn of one conversation (the client appends to
// its messages), differs between conversations that share only a system prompt, ignores
// fields around the messages, and is 0 when there is no messages array or no user message.
func TestConversationHash(t *testing.T) {
	t.Parallel()
	const sys = `{"role":"system","content":"You are terse. Quote: \"[x]\" {y}"}`
	turn1 := `{"model":"m","messages":[` + sys + `,{"role":"user","content":"fix the build"}],"stream":true}`
	turn2 := `{"model":"m","temperature":0.2,"messages":[` + sys + `,{"role":"user","content":"fix the build"},{"role":"assistant","content":"done"},{"role":"user","content":"and the tests"}]}`
	other := `{"model":"m","messages":[` + sys + `,{"role":"user","content":"write docs"}]}`
	spaced := `{"messages" : [ {"role": "user", "content": "fix the build"} ]}`
	h1 := conversationHash([]byte(turn1))
	if h1 == 0 || conversationHash([]byte(turn2)) != h1 {
		t.Errorf("turns of one conversation: %x and %x, want equal and not 0", h1, conversationHash([]byte(turn2)))
	}
	if conversationHash([]byte(other)) == h1 {
		t.Error("another conversation with the same system prompt has the same hash")
	}
	if conversationHash([]byte(spaced)) == 0 {
		t.Error("a spaced role was not found")
	}
	for _, body := range []string{
		`{"model":"m","prompt":"fix the build"}`,
		`{"messages":[` + sys + `]}`,
		`{"messages":"not an array"}`,
		`{"messages":[{"role":"user","content":"unterminated`,
		``,
	} {
		if h := conversationHash([]byte(body)); h != 0 {
			t.Errorf("%s: %x, want 0", body, h)
		}
	}
}

// conversationHash never panics, and a body it hashes has a messages array whose hashed
// opening is a prefix of the body from "messages" on.
func FuzzConversationHash(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"a\"]}"}]}`))
	f.Add([]byte(`{"messages":[[{"role":"user"}],{"role":"user"}]}`))
	f.Add([]byte(`{"messages":[{"role":"system","content":"\\"},{"role":"user"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if h := conversationHash(body); h != 0 && !bytes.Contains(body, []byte(`"messages"`)) {
			t.Errorf("hash %x of a body without messages", h)
		}
	})
}
