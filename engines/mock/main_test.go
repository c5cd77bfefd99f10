package mock_test

import (
	"testing"

	"github.com/switchyard/switchyard/engines/mock/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }
