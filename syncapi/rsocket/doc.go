// Package rsocket is the RSocket frame layer.
package rsocket
