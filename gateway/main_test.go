package gateway_test

import (
	"testing"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }
