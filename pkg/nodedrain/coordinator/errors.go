package coordinator

import "errors"

// ErrLeaseLapsed is matched by the error of a Kubernetes write the coordinator did not make
// because its Lease was not renewed within the renew deadline: another replica may lead by now.
var ErrLeaseLapsed = errors.New("leadership lapsed: the Lease was not renewed in time")
