package remote

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	good := map[string]string{"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
	for _, tc := range []struct {
		name string
		set  map[string]string // over good; "" unsets
		want string            // error, or "" for success
	}{
		{"ok", nil, ""},
		{"no rank", map[string]string{"RANK": ""}, "remote: RANK is not set"},
		{"rank not a number", map[string]string{"RANK": "two"}, `remote: RANK="two" is not an integer`},
		{"rank too large", map[string]string{"RANK": "4"}, "remote: RANK=4 is not in 0..WORLD_SIZE-1 (WORLD_SIZE=4)"},
		{"negative rank", map[string]string{"RANK": "-1"}, "remote: RANK=-1 is not in 0..WORLD_SIZE-1 (WORLD_SIZE=4)"},
		{"no world", map[string]string{"WORLD_SIZE": ""}, "remote: WORLD_SIZE is not set"},
		{"world zero", map[string]string{"WORLD_SIZE": "0"}, "remote: WORLD_SIZE=0 is not positive"},
		{"world too large", map[string]string{"WORLD_SIZE": "99999999999"}, "remote: WORLD_SIZE=99999999999 is more than the 65536 ranks a run may have"},
		{"no master", map[string]string{"MASTER_ADDR": ""}, "remote: MASTER_ADDR is not set"},
		{"no port", map[string]string{"MASTER_PORT": ""}, "remote: MASTER_PORT is not set"},
		{"port not a number", map[string]string{"MASTER_PORT": "http"}, `remote: MASTER_PORT="http" is not an integer`},
		{"port out of range", map[string]string{"MASTER_PORT": "70000"}, "remote: MASTER_PORT=70000 is not a port (1..65535)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range good {
				t.Setenv(k, v)
			}
			for k, v := range tc.set {
				t.Setenv(k, v)
			}
			o, err := FromEnv()
			if tc.want != "" {
				require.EqualError(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, Options{Rank: 2, World: 4, Master: "node0:29500"}, o)
		})
	}
}

func TestFromEnvIPv6(t *testing.T) {
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "1")
	t.Setenv("MASTER_ADDR", "::1")
	t.Setenv("MASTER_PORT", "1234")
	o, err := FromEnv()
	require.NoError(t, err)
	require.Equal(t, "[::1]:1234", o.Master)
}

func TestCheckBoundsTheWorld(t *testing.T) {
	o := Options{Rank: 1, World: MaxWorld + 1, Master: "node0:29500", Token: "t"}
	_, err := o.check()
	require.EqualError(t, err, "remote: world size 65537 is more than the 65536 ranks a run may have")
	o.World = MaxWorld
	_, err = o.check()
	require.NoError(t, err)
}
