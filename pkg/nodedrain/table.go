package nodedrain

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// StatusView is one row of the operator's status view: a node's published status, and its
// pending request if the coordinator has not answered it yet.
type StatusView struct {
	// Site is the JetStream domain the row was read from, in a fleet view across sites.
	Site    string            `json:"site,omitempty"`
	Status  NodeDrainStatus   `json:"status"`
	Request *NodeDrainRequest `json:"request,omitempty"`
}

// SortViews orders rows by site, then node name.
func SortViews(rows []StatusView) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Site != rows[j].Site {
			return rows[i].Site < rows[j].Site
		}
		return rows[i].Status.Node < rows[j].Status.Node
	})
}

// WriteTable prints rows as a table for people: node, status, requester, attempt, age (since the
// drain started, else since the last update), the message, and each blocker on its own line.
func WriteTable(w io.Writer, rows []StatusView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	site := func(string) string { return "" }
	if slices.ContainsFunc(rows, func(r StatusView) bool { return r.Site != "" }) {
		site = func(s string) string { return s + "\t" }
	}
	fmt.Fprintln(tw, site("SITE")+"NODE\tSTATUS\tREQUESTER\tATTEMPT\tAGE\tMESSAGE")
	for _, r := range rows {
		st := r.Status
		requester := "-"
		if st.RequestedBy != 0 {
			requester = st.RequestedBy.String()
		} else if r.Request != nil {
			requester = r.Request.RequestedBy.String()
		}
		if r.Request != nil && r.Request.Context != "" {
			requester += " (" + r.Request.Context + ")"
		}
		attempt := "-"
		if st.Attempt > 0 {
			attempt = fmt.Sprint(st.Attempt)
		}
		since := st.StartedAt
		if since.IsZero() {
			since = st.UpdatedAt
		}
		if since.IsZero() && r.Request != nil {
			since = r.Request.RequestedAt
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", site(r.Site), st.Node, st.Status, requester, attempt, age(now, since), oneLine(st.Message))
		for _, b := range st.Blockers {
			name := b.Name
			if b.Namespace != "" {
				name = b.Namespace + "/" + b.Name
			}
			progress := ""
			if b.Progress > 0 {
				progress = fmt.Sprintf(" [%d%%]", b.Progress)
			}
			fmt.Fprintf(tw, "%s\t  blocked by %s %s%s\t\t\t\t%s\n", site(""), strings.ToLower(string(b.Kind)), name, progress, oneLine(b.Reason))
		}
	}
	return tw.Flush()
}

// WriteJSON prints rows as an indented JSON array (statuses and requests in their wire form).
func WriteJSON(w io.Writer, rows []StatusView) error {
	if rows == nil {
		rows = []StatusView{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

func age(now, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	d := now.Sub(since)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
