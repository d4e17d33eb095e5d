package e2e

import (
	"os"
	"testing"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
