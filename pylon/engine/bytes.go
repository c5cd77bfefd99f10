package engine

import "bytes"

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func trimSpace(b []byte) []byte { return bytes.TrimSpace(b) }
