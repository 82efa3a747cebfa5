// Command go_mysql drives the embedded upstream with Go's go-sql-driver/mysql through server-side prepared
// statements (the driver prepares every query with arguments unless interpolateParams is set) and prints what it
// read back as JSON, for tests/upstream/sql/test_prepared_statements.py to check.
//
// Usage: go_mysql DSN
package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	_ "github.com/go-sql-driver/mysql"
)

type row struct {
	ID    int64    `json:"id"`
	S     *string  `json:"s"`
	N     *int64   `json:"n"`
	F     *float64 `json:"f"`
	Bytes []byte   `json:"b"`
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	db, err := sql.Open("mysql", os.Args[1])
	must(err)
	defer db.Close()
	db.SetMaxOpenConns(1)

	long := strings.Repeat("long-data ", 600) // past maxAllowedPacket/(params+1): sent by COM_STMT_SEND_LONG_DATA
	ins, err := db.Prepare("INSERT INTO gt (id, s, n, f, b) VALUES (?, ?, ?, ?, ?)")
	must(err)
	for _, args := range [][]any{
		{1, "it's", 10, 1.5, []byte{0, 1, 2, 255}},
		{2, nil, nil, nil, nil},
		{3, "x'), (99, 'injected", -3, -0.25, []byte("b")},
		{4, long, int64(1) << 40, 1e300, nil},
	} {
		_, err := ins.Exec(args...)
		must(err)
	}
	must(ins.Close())

	res, err := db.Exec("UPDATE gt SET n = n + ? WHERE id = ?", 5, 1)
	must(err)
	updated, err := res.RowsAffected()
	must(err)

	rows, err := db.Query("SELECT id, s, n, f, b FROM gt WHERE id >= ? ORDER BY id", 1)
	must(err)
	var out []row
	for rows.Next() {
		var r row
		must(rows.Scan(&r.ID, &r.S, &r.N, &r.F, &r.Bytes))
		out = append(out, r)
	}
	must(rows.Err())

	var missing int
	err = db.QueryRow("SELECT COUNT(*) FROM gt WHERE id = ?", 99).Scan(&missing)
	must(err)
	must(json.NewEncoder(os.Stdout).Encode(map[string]any{
		"rows": out, "updated": updated, "injected": missing, "long": len(long),
	}))
}
