package syncrules

import "github.com/syncpipe/syncpipe/model"

// Transitional names for what moved to model; model-rename.sh moves their
// users and deletes this file.
type (
	Value = model.Value
	Kind  = model.Kind
)

const (
	KindNull    = model.KindNull
	KindInteger = model.KindInteger
	KindReal    = model.KindReal
	KindText    = model.KindText
	KindBlob    = model.KindBlob
)

var (
	Null           = model.Null
	Int            = model.Int
	Real           = model.Real
	Text           = model.Text
	Blob           = model.Blob
	Bool           = model.Bool
	AppendJSNumber = model.AppendJSNumber
)

// AppendJSONString is model.AppendJSONString.
func AppendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	return model.AppendJSONString(dst, s)
}
