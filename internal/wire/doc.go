// Package wire holds the wire contracts between gateway and pylon: the header names of
// the routing contract, the registration snapshot a pylon PUTs to every gateway (with the
// 17 published stats fields per model), the load update it PATCHes between full
// registrations, and the compact x-pylon-load report carried on every pylon response.
// Pure: encoding and decoding only.
//
// docs/wire.md describes the contract for readers: every registration field and what the
// gateway does with it, the x-pylon-load format and how reports and registrations are
// ordered, the request headers, and the status codes a pylon answers with.
package wire
