package nodedrain_test

import (
	"errors"
	"fmt"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func ExampleDecodeOverride() {
	for _, in := range []string{
		`{"Status":9,"RequestedBy":2}`,
		`{"Status":"complete","RequestedBy":"deviceop"}`,
		`{"Status":9,"RequestedBy":7}`,
		`{"RequestedBy":2}`,
		`{"Status":9,"RequestedBy":2`,
	} {
		o, err := nodedrain.DecodeOverride([]byte(in))
		if err != nil {
			fmt.Println(errors.Is(err, nodedrain.ErrMalformed), err)
			continue
		}
		fmt.Println(o.Status, o.RequestedBy)
	}
	// Output:
	// COMPLETE DEVICEOP
	// COMPLETE DEVICEOP
	// false invalid status override: RequestedBy: unknown requester 7 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)
	// false invalid status override: override has no Status
	// true malformed status override: unexpected end of JSON input at line 1, column 28 (byte offset 27) (truncated?)
}

func ExampleEncodeStatus() {
	b, err := nodedrain.EncodeStatus(nodedrain.NodeDrainStatus{
		Node:    "edge-1.example.com",
		Status:  nodedrain.StatusCordoned,
		Attempt: 1,
		Blockers: []nodedrain.Blocker{{
			Kind: nodedrain.BlockerVolume, Name: "pvc-x", Progress: 45,
			Reason: "last healthy replica, rebuilding on node-b",
		}},
	})
	fmt.Println(string(b), err)
	// Output:
	// {"Node":"edge-1.example.com","Status":5,"Attempt":1,"Blockers":[{"Kind":"Volume","Name":"pvc-x","Reason":"last healthy replica, rebuilding on node-b","Progress":45}]} <nil>
}
