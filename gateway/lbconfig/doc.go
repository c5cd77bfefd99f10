// Package lbconfig decodes lb-config.json and resolves the x-routing-method header.
//
// The model (the reference router's lb-config.json): a Config holds the algorithm definition for models without
// their own entry (Default), per-model definitions (Models) and the allowlist of
// definitions a request may select by header (RequestAlgorithms, top level and per
// model). An Entry is one fully resolved definition: defaults applied, the reference's
// normalisations done (virtual nodes and n: 0 → 1), durations as time.Duration.
//
// Invariants: Parse and Load return either an error or a Config whose every kept Entry
// passes Entry.Validate and whose request_algorithms keys equal their entry's algorithm.
// Without a file, Default() is permissive: every algorithm can be selected by header
// with default settings. With a file, only the model's own algorithm and the listed
// request_algorithms can be selected.
//
// Units: *_ms fields become time.Duration (values beyond its range saturate);
// max_input_work_seconds stays float64 seconds; counts are int; max_queued is uint64.
//
// The package is pure apart from Load reading one file: no logging, no clocks.
package lbconfig
