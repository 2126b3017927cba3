// Package syncrules compiles PowerSync edition-1 sync rules and evaluates
// source rows and sync requests against them.
package syncrules
