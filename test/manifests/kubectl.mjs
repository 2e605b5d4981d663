// SPDX-License-Identifier: Apache-2.0
// kubectl for the manifests tests: found, asked its version, and run offline only.
//
// Only `kubectl kustomize`, `kubectl version --client` and `kubectl create ...
// --dry-run=client` are run, none of which needs a cluster. Yet a kubectl may still
// call the server it is configured for: Google Cloud SDK's kubectl dispatcher asks it
// for its version to pick a matching kubectl.1.XX. So kubectl always runs with a
// kubeconfig of its own that names a closed port on the loopback address, never the
// user's.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// The environment to run kubectl in; writes its kubeconfig into workDir.
export function offlineEnv(workDir) {
	const kubeconfig = path.join(workDir, "kubeconfig-offline");
	// Written aside and renamed: the tests run at once, and a kubectl of one must never
	// read the file half written by another. Port 9 (discard): nothing listens there,
	// so a connection is refused at once.
	const written = `${kubeconfig}.${process.pid}`;
	fs.writeFileSync(written, `apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: offline, user: {token: offline}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
`);
	fs.renameSync(written, kubeconfig);
	return { ...process.env, KUBECONFIG: kubeconfig };
}

// { minor, gitVersion, kustomize } of the kubectl, or { missing: true } when there is
// none, or { error } when it does not answer. kubectl up to 1.20 prints no kustomize
// version: those embed kustomize v2.0.3.
export function kubectlVersion(kubectl, env) {
	const run = spawnSync(kubectl, ["version", "--client", "-o", "json"], { encoding: "utf8", env, timeout: 60000 });
	if (run.error && run.error.code === "ENOENT")
		return { missing: true };
	if (run.status !== 0)
		return { error: `${kubectl} version --client -o json exited ${run.status}: ${run.stderr || run.error}` };
	let info;
	try {
		info = JSON.parse(run.stdout);
	} catch (error) {
		return { error: `${kubectl} version --client -o json printed no JSON: ${error.message}` };
	}
	const client = info.clientVersion ?? {};
	const minor = Number.parseInt(client.minor, 10); // "20", or "20+" in some builds
	if (client.major !== "1" || !Number.isInteger(minor))
		return { error: `unexpected kubectl version ${JSON.stringify(client)}` };
	return { minor, gitVersion: client.gitVersion, kustomize: info.kustomizeVersion ?? (minor <= 20 ? "v2.0.3" : "unknown") };
}

// `kubectl kustomize DIR`, parsed as Kubernetes reads YAML (1.1).
export function kustomizeBuild(kubectl, env, YAML, dir) {
	const out = spawnSync(kubectl, ["kustomize", dir], { encoding: "utf8", env, timeout: 120000 });
	if (out.status !== 0)
		return { error: `kubectl kustomize ${dir} failed: ${(out.stderr || String(out.error)).trim()}` };
	return { objects: YAML.parseAllDocuments(out.stdout, { version: "1.1" }).map((d) => d.toJS()).filter(Boolean) };
}
