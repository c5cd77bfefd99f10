// Package chartcheck holds the tests of the Helm chart in deploy/helm/switchyard: it
// renders the chart with the Helm SDK (the default values and each ci/*-values.yaml),
// decodes every object strictly into the Kubernetes API types, checks the pod security,
// probes, resources and cross-references of what it renders, checks every flag given to
// gateway, pylon and engine against the binaries' --help, lints the chart, and keeps
// deploy/gateway.yaml and deploy/engine-with-pylon.yaml equal to the chart's rendering.
// It is a module of its own so that Helm and the Kubernetes libraries stay out of
// Switchyard's go.mod.
package chartcheck
