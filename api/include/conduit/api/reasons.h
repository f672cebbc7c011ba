// Why an agent's transfer failed or was cancelled (TransferStatus.reason in agent/openapi.yaml): codes a
// caller can act on. The agent sets them; the controller copies them into TransferJob conditions and uses
// the same names for the same causes it finds itself (controller/reconcile/step.h).
#pragma once

namespace conduit::api::reason {

inline constexpr const char* kAgentShuttingDown = "AgentShuttingDown";
inline constexpr const char* kStalled = "Stalled";
inline constexpr const char* kPeerUnreachable = "PeerUnreachable";
// A target refused this transfer for who asked or what for (a 403 by its rules: identity, range, namespace;
// a certificate one side does not trust): the same at every retry, so the job fails at once.
inline constexpr const char* kRemoteAccessDenied = "RemoteAccessDenied";
// The access the transfer had is gone: a target's grant revoked or expired (its key refused by the fabric,
// or its landing reports by the target), or credentials the target no longer takes (a 401 while a token
// rotates). A new attempt makes new grants.
inline constexpr const char* kAccessLost = "AccessLost";
inline constexpr const char* kChecksumMismatch = "ChecksumMismatch";
inline constexpr const char* kDeadlineExceeded = "DeadlineExceeded";
inline constexpr const char* kCancelled = "Cancelled";
inline constexpr const char* kRegistrationFailed = "RegistrationFailed";
inline constexpr const char* kTransportError = "TransportError";
// A target that saves as bytes land found its file system full (or over quota).
inline constexpr const char* kNoSpaceLeft = "NoSpaceLeft";
// A file source changed size, was modified, removed or replaced while it was read.
inline constexpr const char* kSourceFileChanged = "SourceFileChanged";
// A Chain hop's forwarding transfer lost what fed it: the grant it forwards from is gone (revoked, expired),
// or nothing landed on it for three stall timeouts.
inline constexpr const char* kUpstreamLost = "UpstreamLost";

// Every one of them, as TransferStatus.reason lists them.
inline constexpr const char* kAll[] = {
    kAgentShuttingDown, kStalled,      kPeerUnreachable,    kRemoteAccessDenied, kChecksumMismatch,
    kDeadlineExceeded,  kCancelled,    kRegistrationFailed, kTransportError,     kNoSpaceLeft,
    kSourceFileChanged, kUpstreamLost, kAccessLost};

}  // namespace conduit::api::reason
