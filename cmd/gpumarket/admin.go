package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// adminCreate creates an administrator account. Admins exist only through
// this command, never through sign-up.
func adminCreate(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("admin create", flag.ContinueOnError)
	dbPath := fs.String("db", envOr(getenv, "GPUMARKET_DB", "./data/gpumarket.db"), "SQLite database path (env GPUMARKET_DB)")
	email := fs.String("email", "", "admin email address")
	name := fs.String("name", "Administrator", "display name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	password := getenv("GPUMARKET_ADMIN_PASSWORD")
	if password == "" {
		fmt.Fprint(stdout, "password: ")
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		password = strings.TrimRight(line, "\r\n")
	}
	su := market.SignUp{Email: *email, Password: password, DisplayName: *name, IsBuyer: true}
	if err := market.ValidateSignUp(&su); err != nil {
		return fmt.Errorf("%v", err)
	}
	hash, err := account.Hash(password, account.DefaultCost)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := db.CreateUser(ctx, market.User{Email: su.Email, DisplayName: su.DisplayName, IsBuyer: true, IsAdmin: true}, hash, time.Now().UTC())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "admin %s created (id %d)\n", u.Email, u.ID)
	return nil
}
