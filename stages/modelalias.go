package stages

import "github.com/syncpipe/syncpipe/model"

// Transitional names for the types that moved to model; model-rename.sh
// moves their users and deletes this file.
type (
	Table      = model.Table
	ChangeKind = model.ChangeKind
	Change     = model.Change
	Put        = model.Put
	Lookup     = model.Lookup
)

const (
	Upsert   = model.Upsert
	Delete   = model.Delete
	Truncate = model.Truncate
)
