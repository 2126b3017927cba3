// Package model is the ground floor every layer of syncpipe shares: the
// values a source row is made of (Value, Kind), the changes a sink persists
// (Change, Put, Lookup, Table) and their JSON encoding as PowerSync writes
// it (AppendJSONString, AppendJSNumber, AppendJSONNumber).
//
// Sources decode into it, the stages evaluate and build it, sinks write it
// and the sync API encodes it, so it depends on nothing else in the module.
// What values mean to sync rules (truthiness, comparison, casts) belongs to
// the rules engine, stages/syncrules, not here.
package model
