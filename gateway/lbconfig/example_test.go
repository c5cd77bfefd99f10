package lbconfig_test

import (
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

func ExampleParse() {
	c, err := lbconfig.Parse([]byte(`{
		"default": "power-of-n",
		"request_algorithms": {"round-robin": "round-robin"},
		"models": {"model-a": {"algorithm": "wait-and-widen", "cache_affinity_backend_selection_count": 2}}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, req := range []struct{ model, header string }{
		{"model-a", ""},
		{"model-a", "Round_Robin"},
		{"model-b", "groq-multiregion"},
		{"model-b", "sticky"},
	} {
		e, err := c.Resolve(req.model, req.header, req.header != "")
		if err != nil {
			// Unknown and not allow-listed values are both answered with 400.
			fmt.Printf("%s %q: 400 (unavailable=%t: %v)\n", req.model, req.header, errors.Is(err, lbconfig.ErrUnavailableAlgorithm), err)
			continue
		}
		fmt.Printf("%s %q: %s selection_count=%d\n", req.model, req.header, e.Algorithm, e.SelectionCount)
	}
	// Output:
	// model-a "": wait-and-widen selection_count=2
	// model-a "Round_Robin": round-robin selection_count=0
	// model-b "groq-multiregion": 400 (unavailable=true: x-routing-method "groq-multiregion": algorithm groq-multiregion is not allow-listed for model "model-b")
	// model-b "sticky": 400 (unavailable=false: x-routing-method "sticky": unknown algorithm)
}
