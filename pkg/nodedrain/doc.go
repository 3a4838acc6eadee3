// Package nodedrain holds edgedrain's wire contract: the drain states, the
// requesters, and the JSON messages that agents and the coordinator exchange
// over the bus and that operators write as override files (DESIGN §1).
//
// The numbers of [DrainStatus] and [Requester] are part of the contract and
// never change. Values are written as JSON numbers; decoders also accept the
// names ("COMPLETE", "deviceop"), case-insensitively.
//
// Payloads read from the bus or from files must go through [DecodeRequest],
// [DecodeStatus] or [DecodeOverride], never through a bare json.Unmarshal:
// the decoders bound the size, reject truncated or trailing data, duplicate
// fields, fields of the wrong JSON type and unknown enum values, and then
// validate the result, so that a bad payload changes no state. Every error
// they return matches exactly one of [ErrPayloadTooLarge], [ErrMalformed] or
// [ErrInvalid] under errors.Is (a metric label), and enum errors also match
// [ErrUnknownStatus] or [ErrUnknownRequester].
//
// Unknown field names are ignored so that an older agent keeps working with a
// newer coordinator that adds fields; field names are otherwise matched
// exactly (a known name in another case is rejected, not silently dropped).
// Payloads written by this package should go through [EncodeRequest],
// [EncodeStatus] or [EncodeOverride], which validate first so that nothing a
// peer would reject is ever published.
package nodedrain
