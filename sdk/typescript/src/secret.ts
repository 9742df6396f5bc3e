// Secrets: values deskboxd keeps and never shows again (/v1/secrets), put into a sandbox's
// requests by the egress proxy (credential rules), so the sandbox uses a credential without
// holding it:
//   await Secret.set("gh", "Bearer ghp_...");
//   await Sandbox.create({ network: { allow: ["api.github.com"], rules: [
//     { domain: "api.github.com", headers: { Authorization: "secret:gh" } }] } });
// Secret.list() gives names and times only: no call returns a value.
import { HttpClient, type ConnectionOptions } from "./http.js";

/** A secret's name and times (never its value). */
export interface SecretInfo {
  name: string;
  createdAt: string;
  updatedAt: string;
  raw: Record<string, any>;
}

function parseSecret(raw: Record<string, any>): SecretInfo {
  return {
    name: raw.name ?? "",
    createdAt: raw.created_at ?? "",
    updatedAt: raw.updated_at ?? "",
    raw,
  };
}

export class Secret {
  /** Stores value under name (replacing one there); BadRequestError for a bad name or value. */
  static async set(name: string, value: string, options: ConnectionOptions = {}): Promise<SecretInfo> {
    return parseSecret(
      await new HttpClient(options).json("POST", "/v1/secrets", { json: { name, value } }),
    );
  }

  static async list(options: ConnectionOptions = {}): Promise<SecretInfo[]> {
    const raw = await new HttpClient(options).json("GET", "/v1/secrets");
    return (raw.secrets ?? []).map(parseSecret);
  }

  /** NotFoundError if there is none. */
  static async delete(name: string, options: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(options).json("DELETE", `/v1/secrets/${encodeURIComponent(name)}`);
  }
}
