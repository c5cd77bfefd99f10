package engine

import (
	"maps"
	"slices"

	"github.com/switchyard/switchyard/pylon/stats"
)

// How a pylon model found its figures in a scrape of the engine's metrics.
const (
	MatchExact = "exact" // the engine's model_name is the model's name
	MatchAlias = "alias" // the engine serves both names for one model (GET /v1/models: same root or parent)
	MatchOnly  = "only"  // the engine reports one model (or none by name) and so every model is it
)

// ServedModel is one entry of the engine's GET /v1/models. vLLM lists every name of
// --served-model-name with the model path as root, and LoRA adapters with the base
// model's name as parent; SGLang lists its one served name.
type ServedModel struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Parent string `json:"parent"`
}

// MatchModel picks the entry of a scrape that describes the pylon model: the entry of its
// own name; else one whose name the engine serves for the same model (served, the GET
// /v1/models answer, nil when unknown: same root, or the model is a LoRA adapter of it);
// else, when the scrape has a single entry, that one (a pylon fronts one engine, and such
// an engine serves one model). how is "" when nothing fits.
func MatchModel(model string, byEngine map[string]stats.EngineMetrics, served []ServedModel) (src, how string) {
	if _, ok := byEngine[model]; ok {
		return model, MatchExact
	}
	if served != nil {
		g := servedGroup(model, served)
		for _, k := range slices.Sorted(maps.Keys(byEngine)) {
			if k != "" && servedGroup(k, served) == g {
				return k, MatchAlias
			}
		}
	}
	if len(byEngine) == 1 {
		for k := range byEngine {
			return k, MatchOnly
		}
	}
	return "", ""
}

// servedGroup names the engine model behind a served name: names with the same root are
// one model, and a LoRA adapter belongs to its parent's model.
func servedGroup(name string, served []ServedModel) string {
	for range 2 { // the parent is a served name itself; one level is all there is
		i := slices.IndexFunc(served, func(s ServedModel) bool { return s.ID == name })
		switch {
		case i < 0:
			return "name:" + name
		case served[i].Parent != "" && served[i].Parent != name:
			name = served[i].Parent
		case served[i].Root != "":
			return "root:" + served[i].Root
		default:
			return "name:" + name
		}
	}
	return "name:" + name
}
