// Error codes of the delayq server: the stable code of every error answer,
// to branch on (APIError.Code). Data only: a test of the server compares the
// quoted codes in this file with its own list.

package delayq

// Codes the delayq server answers with.
const (
	CodeBizKeyTaken        = "biz_key_taken"
	CodeBodyTooLarge       = "body_too_large"
	CodeForbidden          = "forbidden"
	CodeHTTPSRequired      = "https_required"
	CodeInternal           = "internal"
	CodeInvalidBatch       = "invalid_batch"
	CodeInvalidBizKey      = "invalid_biz_key"
	CodeInvalidBody        = "invalid_body"
	CodeInvalidCancel      = "invalid_cancel"
	CodeInvalidContentType = "invalid_content_type"
	CodeInvalidDelay       = "invalid_delay"
	CodeInvalidField       = "invalid_field"
	CodeInvalidGroup       = "invalid_group"
	CodeInvalidID          = "invalid_id"
	CodeInvalidIDs         = "invalid_ids"
	CodeInvalidJSON        = "invalid_json"
	CodeInvalidMaxAttempts = "invalid_max_attempts"
	CodeInvalidMessage     = "invalid_message"
	CodeInvalidParameter   = "invalid_parameter"
	CodeInvalidPath        = "invalid_path"
	CodeInvalidPriority    = "invalid_priority"
	CodeInvalidReceipt     = "invalid_receipt"
	CodeInvalidRepeat      = "invalid_repeat"
	CodeInvalidRetry       = "invalid_retry"
	CodeInvalidShard       = "invalid_shard"
	CodeInvalidTopic       = "invalid_topic"
	CodeInvalidTTL         = "invalid_ttl"
	CodeJournalBehind      = "journal_behind"
	CodeJournalRefused     = "journal_refused"
	CodeJournalUnavailable = "journal_unavailable"
	CodeMissingBody        = "missing_body"
	CodeMissingID          = "missing_id"
	CodeMissingTo          = "missing_to"
	CodeMissingTopic       = "missing_topic"
	CodeNoSuchNode         = "no_such_node"
	CodeNoSuchRoute        = "no_such_route"
	CodeNoSuchShard        = "no_such_shard"
	CodeNodeStalled        = "node_stalled"
	CodeNodeUnavailable    = "node_unavailable"
	CodeNotDead            = "not_dead"
	CodeNotFound           = "not_found"
	CodeNotInFlight        = "not_in_flight"
	CodeNotPossible        = "not_possible"
	CodePayloadTooLarge    = "payload_too_large"
	CodeRedisUnavailable   = "redis_unavailable"
	CodeStaleDelivery      = "stale_delivery"
	CodeUnauthorized       = "unauthorized"
	CodeUnknownField       = "unknown_field"
	CodeUnknownParameter   = "unknown_parameter"
)

// Codes the shipped nginx proxy answers with itself, in front of the nodes.
const (
	CodeNoAnswer = "no_answer"
	CodeNoNode   = "no_node"
)

// ErrorCodes lists every code above: the server codes, then the proxy codes.
var ErrorCodes = []string{
	CodeBizKeyTaken,
	CodeBodyTooLarge,
	CodeForbidden,
	CodeHTTPSRequired,
	CodeInternal,
	CodeInvalidBatch,
	CodeInvalidBizKey,
	CodeInvalidBody,
	CodeInvalidCancel,
	CodeInvalidContentType,
	CodeInvalidDelay,
	CodeInvalidField,
	CodeInvalidGroup,
	CodeInvalidID,
	CodeInvalidIDs,
	CodeInvalidJSON,
	CodeInvalidMaxAttempts,
	CodeInvalidMessage,
	CodeInvalidParameter,
	CodeInvalidPath,
	CodeInvalidPriority,
	CodeInvalidReceipt,
	CodeInvalidRepeat,
	CodeInvalidRetry,
	CodeInvalidShard,
	CodeInvalidTopic,
	CodeInvalidTTL,
	CodeJournalBehind,
	CodeJournalRefused,
	CodeJournalUnavailable,
	CodeMissingBody,
	CodeMissingID,
	CodeMissingTo,
	CodeMissingTopic,
	CodeNoSuchNode,
	CodeNoSuchRoute,
	CodeNoSuchShard,
	CodeNodeStalled,
	CodeNodeUnavailable,
	CodeNotDead,
	CodeNotFound,
	CodeNotInFlight,
	CodeNotPossible,
	CodePayloadTooLarge,
	CodeRedisUnavailable,
	CodeStaleDelivery,
	CodeUnauthorized,
	CodeUnknownField,
	CodeUnknownParameter,
	CodeNoAnswer,
	CodeNoNode,
}
