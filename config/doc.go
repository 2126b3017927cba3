// Package config loads and validates the syncpipe YAML configuration.
package config
