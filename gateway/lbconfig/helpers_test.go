package lbconfig

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
)

// equateEmpty treats nil and empty maps as equal in config comparisons.
var equateEmpty = cmpopts.EquateEmpty()

func quote(s string) string { return strconv.Quote(s) }

// with returns DefaultEntry(a) changed by edit.
func with(a Algorithm, edit func(*Entry)) Entry {
	e := DefaultEntry(a)
	edit(&e)
	return e
}

// named returns DefaultEntry(a) carrying name.
func named(a Algorithm, name string) Entry {
	e := DefaultEntry(a)
	e.Name = name
	return e
}

// problems splits a Parse or Validate error into its messages, without Parse's prefix.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(strings.TrimPrefix(err.Error(), "invalid lb config: "), "\n")
}

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(%s): %v", doc, err)
	}
	return c
}
