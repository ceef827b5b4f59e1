package trace_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/trace"
)

func TestWriteCSV(t *testing.T) {
	tr := fixture()
	tr.Events = tr.Events[:5] // iteration 0
	var buf bytes.Buffer
	if err := trace.WriteCSV(&buf, tr); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"task,name,kind,op,phase,device,stream,iter,micro,start_ns,end_ns,dur_ns",
		"3,load,input,,,gpu1,copy,0,-1,0,10,10",
		"0,fwd,compute,matmul,forward,gpu0,compute,0,-1,0,70,70",
		"1,send,copy,,comm,gpu0,copy,0,-1,70,90,20",
		"2,bwd,compute,matmul,backward,gpu1,compute,0,0,90,110,20",
		"2,bwd,compute,matmul,backward,gpu1,compute,0,1,110,130,20",
	}, "\n") + "\n"
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
