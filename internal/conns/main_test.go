package conns_test

import (
	"testing"

	"github.com/bulkaction/bulkaction/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
