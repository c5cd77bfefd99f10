package gateway

import (
	"fmt"
	"os"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// loadLBConfig reads the lb-config file at path and decodes it with lbconfig.Parse (the
// lbconfig package is pure: no file I/O). Errors name the path.
func loadLBConfig(path string) (*lbconfig.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load lb config: %w", err)
	}
	c, err := lbconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load lb config %s: %w", path, err)
	}
	return c, nil
}
