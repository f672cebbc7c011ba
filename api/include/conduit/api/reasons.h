// Why an agent's transfer failed or was cancelled (TransferStatus.reason in agent/openapi.yaml): codes a
// caller can act on. The agent sets them; the controller copies them into TransferJob conditions and uses
// the same names for the same causes it finds itself (controller/reconcile/step.h).
#pragma once

namespace conduit::api::reason {

inline constexpr const char* kAgentShuttingDown = "AgentShuttingDown";
inline constexpr const char* kStalled = "Stalled";
inline constexpr const char* kPeerUnreachable = "PeerUnreachable";
inline constexpr const char* kRemoteAccessDenied = "RemoteAccessDenied";
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
    kAgentShuttingDown, kStalled,          kPeerUnreachable,   kRemoteAccessDenied,
    kChecksumMismatch,  kDeadlineExceeded, kCancelled,         kRegistrationFailed,
    kTransportError,    kNoSpaceLeft,      kSourceFileChanged, kUpstreamLost};

}  // namespace conduit::api::reason
