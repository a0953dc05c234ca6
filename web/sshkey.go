package web

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/ssh"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// parseSSHKey reads one public key as pasted from a .pub file (or an
// authorized_keys line without options) and returns it, or a message for
// the person naming the problem.
func parseSSHKey(text string) (market.SSHKey, string) {
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return market.SSHKey{}, "Paste your public key: the one line of the .pub file next to your private key in ~/.ssh."
	case len(text) > market.MaxSSHKeyLength:
		return market.SSHKey{}, "That is too long for one public key; paste the one line of your .pub file."
	case strings.Contains(text, "PRIVATE KEY"):
		return market.SSHKey{}, "This is a private key: never paste it anywhere. Paste the public key instead, the one line of the .pub file next to it."
	case strings.HasPrefix(text, "---- BEGIN SSH2 PUBLIC KEY"):
		return market.SSHKey{}, "This key is in the SSH2 (RFC 4716) format. Convert it with ssh-keygen -i -f key.pub and paste the one-line result."
	case strings.ContainsAny(text, "\r\n"):
		return market.SSHKey{}, "Paste one key at a time, on one line."
	}
	if msg := market.TextProblem(text, true); msg != "" {
		return market.SSHKey{}, msg // a NUL or a byte that is not text, before the parser's generic "not a key"
	}
	// A type refused whatever its contents gets its reason, even if this
	// library no longer reads it (DSA).
	if f := strings.Fields(text); f[0] == "ssh-dss" || strings.HasPrefix(f[0], "sk-") {
		return market.SSHKey{}, market.SSHKeyProblem(f[0], 0)
	}
	pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	if err != nil {
		return market.SSHKey{}, "This is not an SSH public key. It should look like \"ssh-ed25519 AAAAC3Nza… you@laptop\": paste the one line of your .pub file."
	}
	if len(options) > 0 {
		return market.SSHKey{}, fmt.Sprintf("Paste the key without the options in front of it (%s): start with the key type, e.g. ssh-ed25519.", strings.Join(options, ","))
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return market.SSHKey{}, "Paste one key at a time."
	}
	k := market.SSHKey{Type: pub.Type(), Fingerprint: ssh.FingerprintSHA256(pub), Comment: strings.TrimSpace(comment)}
	if cp, ok := pub.(ssh.CryptoPublicKey); ok {
		switch key := cp.CryptoPublicKey().(type) {
		case *rsa.PublicKey:
			k.Bits = key.N.BitLen()
		case *ecdsa.PublicKey:
			k.Bits = key.Curve.Params().BitSize
		}
	}
	if k.Type == ssh.KeyAlgoED25519 {
		k.Bits = 256
	}
	if msg := market.SSHKeyProblem(k.Type, k.Bits); msg != "" {
		return market.SSHKey{}, msg
	}
	if msg := market.SSHCommentProblem(k.Comment); msg != "" {
		return market.SSHKey{}, msg
	}
	k.Line = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if k.Comment != "" {
		k.Line += " " + k.Comment
	}
	return k, ""
}

// sshKeysView lists the user's keys for the account page.
func (h *Handler) sshKeysView(c echo.Context, value, problem string) (views.SSHKeysView, error) {
	keys, err := h.db.ListSSHKeys(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return views.SSHKeysView{}, err
	}
	v := views.SSHKeysView{Value: value, Error: problem}
	for _, k := range keys {
		v.Keys = append(v.Keys, views.SSHKeyRow{
			Type: fmt.Sprintf("%s %d bits", market.SSHKeyTypeLabel(k.Type), k.Bits), Fingerprint: k.Fingerprint,
			Comment: orDash(k.Comment), Added: formatDate(k.CreatedAt), RemoveURL: fmt.Sprintf("/account/ssh-keys/%d/remove", k.ID)})
	}
	return v, nil
}

func (h *Handler) handleSSHKeyAdd(c echo.Context) error {
	text := c.FormValue("public_key")
	invalid := func(msg string) error {
		v, err := h.accountView(c, nil)
		if err != nil {
			return err
		}
		if v.SSH, err = h.sshKeysView(c, text, msg); err != nil {
			return err
		}
		return render(c, http.StatusUnprocessableEntity, views.Account(h.page(c, "Account"), v))
	}
	k, problem := parseSSHKey(text)
	if problem != "" {
		return invalid(problem)
	}
	k, err := h.wf.AddSSHKey(c.Request().Context(), currentUser(c).ID, k)
	if code := market.ErrorCode(err); code == market.CodeConflict || code == market.CodeInvalid {
		return invalid(market.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("SSH key %s added: it is sent to the machines you rent from now on.", k.Fingerprint))
	return c.Redirect(http.StatusSeeOther, "/account#ssh-h")
}

func (h *Handler) handleSSHKeyRemove(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.RemoveSSHKey(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "SSH key removed: it is no longer sent to the machines you rent.")
	return c.Redirect(http.StatusSeeOther, "/account#ssh-h")
}
