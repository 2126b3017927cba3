package benchmarks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// LoadResults reads the saved <scenario>.json results of every registered
// scenario found in dir, in registry order, so a summary can be written
// for scenarios run one at a time.
func LoadResults(dir string) ([]Result, error) {
	var out []Result
	for _, s := range registry {
		b, err := os.ReadFile(filepath.Join(dir, s.Name+".json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load results: %w", err)
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("load results: %s.json: %w", s.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
