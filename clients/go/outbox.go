package delayq

import (
	"errors"
	"fmt"
)

// ErrOutboxOnDuplicate is OutboxRow's error for a message whose
// OnDuplicate is OnDuplicateReplace or OnDuplicateExtend: the server
// refuses those in an outbox row (their change is not part of the
// journal transaction that records the row), so only OnDuplicateKeep or
// none is taken. Test for it with errors.Is.
var ErrOutboxOnDuplicate = errors.New("delayq: an outbox row takes onDuplicate keep or none")

// OutboxRow returns the JSON text of a row of the transactional outbox's
// message column: m exactly as Push sends it (Message.MarshalJSON).
//
// Insert it in the application's own transaction, e.g. PostgreSQL
// `INSERT INTO delayq_outbox (message) VALUES ($1::json)` or MySQL
// `INSERT INTO delayq_outbox (message) VALUES (?)`; a delayq node started
// with --outbox-url pushes each committed row once (`delayq outbox
// install` makes the table). See "Transactional enqueue: the outbox" in
// docs/src/operating.md.
//
// A message with OnDuplicate other than OnDuplicateKeep or empty is
// refused with an error wrapping ErrOutboxOnDuplicate.
func OutboxRow(m Message) (string, error) {
	if m.OnDuplicate != "" && m.OnDuplicate != OnDuplicateKeep {
		return "", fmt.Errorf("%w, not %q", ErrOutboxOnDuplicate, m.OnDuplicate)
	}
	b, err := m.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("delayq: encoding the outbox row: %w", err)
	}
	return string(b), nil
}
