/**
 * The one place where calls are authenticated, authorized and audited: a
 * grpc-js server interceptor in front of every service.
 *
 * Per call: the metadata names the caller (UNAUTHENTICATED otherwise; the
 * handler never sees the call); each request message is checked against the
 * access table (PERMISSION_DENIED naming the scope; on a Lease stream, every
 * message, and a refused one ends the stream, or on an EnqueueStream is handed
 * on as a RefusedMessage for the handler to answer); a Lease open also takes one of
 * the caller's stream slots (RESOURCE_EXHAUSTED when none is left), given back
 * when the call ends. For mutating calls, the status waits until the audit
 * entry is written, so a caller that saw the result can read the entry.
 */
import * as grpc from "@grpc/grpc-js";
import { SwitchyardError } from "../errors.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";
import { ANONYMOUS, type Authenticator, type Principal } from "../auth/authenticator.js";
import type { AuditLogStore } from "../auth/audit-log.js";
import { describeNeed, type Need } from "../auth/scopes.js";
import { accessRules, isOpenMethod, RefusedMessage, type AccessRule, type AuditTarget } from "./access.js";
import { MalformedMessage } from "./adapter.js";
import { errorStatus } from "./status.js";

/** What the interceptor works with. */
export interface AuthParts {
  authenticator: Authenticator;
  audit: AuditLogStore;
  clock: Clock;
  /** This instance's name in audit entries. */
  instanceId: string;
  /** Open Lease streams one authenticated caller may hold on this instance. */
  maxLeaseStreamsPerToken: number;
  log: Logger;
}

const callers = new WeakMap<grpc.Metadata, Principal>();

/** The caller of a call, as the interceptor authenticated it (a job's create/update actor). */
export function callerOf(metadata: grpc.Metadata): Principal {
  return callers.get(metadata) ?? ANONYMOUS;
}

function peerCommonName(call: grpc.ServerInterceptingCallInterface): string | undefined {
  const cn = call.getAuthContext().sslPeerCertificate?.subject?.CN as string | string[] | undefined;
  return Array.isArray(cn) ? cn[0] : cn || undefined;
}

/** Why `principal` may not send `message` to `method`, or undefined when it may. */
function denial(rule: AccessRule | undefined, method: string, principal: Principal, message: unknown): SwitchyardError | undefined {
  // `*` allows every need: nothing in the message needs reading (a Lease stream's acks would parse each token).
  if (principal.grants.all) return undefined;
  if (!rule) {
    return new SwitchyardError("permission_denied", `${method} has no access rule; only a caller with scope * may call it`, { reason: "MISSING_SCOPE" });
  }
  const needs: Need[] =
    message instanceof MalformedMessage || !rule.needs ? rule.scopes.map((scope) => ({ scope })) : rule.needs(message as never);
  return refusal(method, principal, needs);
}

/** PERMISSION_DENIED naming the first of `needs` that `principal` lacks, or undefined when it has them all. */
export function refusal(method: string, principal: Principal, needs: readonly Need[]): SwitchyardError | undefined {
  const missing = needs.find((need) => !principal.grants.allows(need));
  if (!missing) return undefined;
  const on = missing.queue && missing.queue !== "*" ? ` on queue "${missing.queue}"` : "";
  // A key a declaration names is refused as such: the caller may administer the queue, but not that key.
  return new SwitchyardError("permission_denied", `${method}${on} needs scope ${describeNeed(missing)}; caller "${principal.name}" does not have it`, {
    reason: missing.key ? "KEY_NOT_ALLOWED" : "MISSING_SCOPE",
    metadata: missing.queue === undefined ? { scope: missing.scope } : { scope: missing.scope, queue: missing.queue },
  });
}

function auditTarget(rule: AccessRule, request: unknown, response: unknown): AuditTarget {
  if (request === undefined || request instanceof MalformedMessage) return { target: "" };
  return rule.audit!(request as never, response as never);
}

/** The interceptor; one per server (it counts each caller's open Lease streams). */
export function authInterceptor(parts: AuthParts): grpc.ServerInterceptor {
  const { authenticator, audit, clock, log } = parts;
  const openStreams = new Map<string, number>();

  return (descriptor, call) => {
    if (isOpenMethod(descriptor.path)) return new grpc.ServerInterceptingCall(call);
    const rule = accessRules[descriptor.path];
    const method = descriptor.path.slice(1);
    const shortName = method.slice(method.lastIndexOf("/") + 1);
    let principal: Principal | undefined;
    let refused = false;
    let request: unknown;
    let response: unknown;
    let streamSlot: string | undefined;

    const release = () => {
      if (streamSlot === undefined) return;
      const left = (openStreams.get(streamSlot) ?? 1) - 1;
      if (left > 0) openStreams.set(streamSlot, left);
      else openStreams.delete(streamSlot);
      streamSlot = undefined;
    };
    const refuse = (err: SwitchyardError) => {
      refused = true;
      intercepted.sendStatus(errorStatus(err));
    };
    // One slot per open Lease stream of an authenticated caller.
    const takeStreamSlot = (who: Principal): SwitchyardError | undefined => {
      if (!who.authenticated || parts.maxLeaseStreamsPerToken <= 0) return undefined;
      const open = openStreams.get(who.name) ?? 0;
      if (open >= parts.maxLeaseStreamsPerToken) {
        return new SwitchyardError(
          "resource_exhausted",
          `caller "${who.name}" already has ${open} open Lease streams on this instance, the limit ` +
            `(SWITCHYARD_MAX_LEASE_STREAMS_PER_TOKEN=${parts.maxLeaseStreamsPerToken}); close one, or raise the limit`,
          { reason: "LIMIT_EXCEEDED" },
        );
      }
      openStreams.set(who.name, open + 1);
      streamSlot = who.name;
      return undefined;
    };

    const intercepted: grpc.ServerInterceptingCall = new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            try {
              principal = authenticator.authenticate(metadata.get("authorization").map(String), peerCommonName(call));
            } catch (err) {
              if (!(err instanceof SwitchyardError)) throw err;
              log.warn("call refused", { method, peer: call.getPeer(), reason: err.message });
              refuse(err);
              return;
            }
            // Handlers never see the token.
            metadata.remove("authorization");
            callers.set(metadata, principal);
            nextMetadata(metadata);
          },
          onReceiveMessage: (message, nextMessage) => {
            if (refused || !principal) return;
            if (rule?.audit && request === undefined) request = message;
            let err = denial(rule, shortName, principal, message);
            const kind = (message as { kind?: { case?: string } }).kind?.case;
            if (!err && descriptor.requestStream && kind === "open" && streamSlot === undefined) err = takeStreamSlot(principal);
            if (err) {
              if (err.code === "permission_denied") log.warn("call refused", { method, caller: principal.name, reason: err.message });
              if (rule?.refusesInBand) nextMessage(new RefusedMessage(message, err));
              else refuse(err);
              return;
            }
            nextMessage(message);
          },
          onReceiveHalfClose: (nextHalfClose) => {
            if (!refused) nextHalfClose();
          },
          onCancel: release,
        }),
      sendMessage: (message, nextMessage) => {
        if (rule?.audit) response = message;
        nextMessage(message);
      },
      sendStatus: (status, nextStatus) => {
        release();
        if (!rule?.audit || !principal) return nextStatus(status);
        const ok = status.code === grpc.status.OK;
        let what: AuditTarget;
        try {
          what = auditTarget(rule, request, ok ? response : undefined);
        } catch (err) {
          log.error("could not describe an audited call", { method, err });
          what = { target: "" };
        }
        audit
          .append({
            timeMs: clock.now(),
            actor: principal.name,
            method,
            target: what.target,
            detail: what.detail ?? "",
            code: status.code ?? grpc.status.UNKNOWN,
            message: ok ? "" : (status.details ?? ""),
            peer: call.getPeer(),
            instanceId: parts.instanceId,
          })
          .catch((err: unknown) => log.error("could not write the audit log", { method, actor: principal?.name, err }))
          .finally(() => nextStatus(status));
      },
    });
    return intercepted;
  };
}
