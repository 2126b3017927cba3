package clienttest

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
