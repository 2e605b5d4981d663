// SPDX-License-Identifier: Apache-2.0
// Offline checks of manifests/: every object against the Kubernetes schemas (the npm
// package kubernetes-models), no field unknown to them, the DaemonSet's security and
// compatibility policy, the kustomization, and the agent itself on the example config
// and the DaemonSet's args.
//
// node validate.mjs --manifests DIR --packages DIR --work DIR [--agent PATH] [--version X]
//   --packages: where package.json and package-lock.json are (this directory)
//   --work:     where `npm ci` installs them (the build directory)
// Exit status: 0 all passed, 1 a check failed, 77 skipped (no npm).

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { kubectlVersion, kustomizeBuild, offlineEnv } from "./kubectl.mjs";
import { installPackages } from "./npm-packages.mjs";

function parseArgs(argv) {
	const args = {};
	for (let i = 0; i < argv.length; i += 2) {
		if (!argv[i].startsWith("--") || argv[i + 1] === undefined) {
			console.error(`usage: node validate.mjs --manifests DIR --packages DIR --work DIR [--agent PATH] [--version X]`);
			process.exit(2);
		}
		args[argv[i].slice(2)] = argv[i + 1];
	}
	for (const required of ["manifests", "packages", "work"])
		if (!args[required]) {
			console.error(`validate.mjs: --${required} is required`);
			process.exit(2);
		}
	return args;
}

const args = parseArgs(process.argv.slice(2));

// ---------------------------------------------------------------- dependencies

const npmDir = installPackages(args.packages, args.work);
const requireFromNpm = createRequire(path.join(npmDir, "package.json"));
const YAML = requireFromNpm("yaml");

// ---------------------------------------------------------------- reporting

let passed = 0;
let failed = 0;

function check(name, problems) {
	if (problems.length === 0) {
		passed++;
		console.log(`ok - ${name}`);
		return true;
	}
	failed++;
	console.log(`not ok - ${name}`);
	for (const problem of problems)
		console.log(`    ${problem}`);
	return false;
}

// ---------------------------------------------------------------- YAML and schemas

// Kubernetes decodes YAML 1.1 (go-yaml): parse the same way, duplicate keys are errors.
function parseYamlFile(file) {
	const text = fs.readFileSync(file, "utf8");
	const documents = YAML.parseAllDocuments(text, { version: "1.1", uniqueKeys: true, prettyErrors: true });
	const problems = [];
	const objects = [];
	for (const [index, doc] of documents.entries()) {
		for (const error of doc.errors)
			problems.push(`document ${index + 1}: ${error.message}`);
		for (const warning of doc.warnings)
			problems.push(`document ${index + 1}: ${warning.message}`);
		const value = doc.toJS();
		if (value !== null && value !== undefined)
			objects.push(value);
	}
	return { objects, problems };
}

// "apps/v1" + "DaemonSet" -> kubernetes-models/apps/v1/DaemonSet; "v1" -> kubernetes-models/v1/...
function modelFor(object) {
	const { apiVersion, kind } = object ?? {};
	if (typeof apiVersion !== "string" || typeof kind !== "string")
		return { error: "apiVersion and kind must be strings" };
	if (!/^[A-Za-z0-9.-]+(\/[A-Za-z0-9]+)?$/.test(apiVersion) || !/^[A-Za-z0-9]+$/.test(kind))
		return { error: `unexpected apiVersion "${apiVersion}" or kind "${kind}"` };
	try {
		const model = requireFromNpm(`kubernetes-models/${apiVersion}/${kind}`)[kind];
		if (typeof model === "function")
			return { model };
	} catch {
		// fall through
	}
	return { error: `${apiVersion} ${kind} is not a built-in Kubernetes kind (kubernetes-models has no model for it)` };
}

function schemaErrors(model, object) {
	try {
		new model(object).validate();
		return [];
	} catch (error) {
		if (Array.isArray(error.errors))
			return error.errors.map((e) => ({ path: e.instancePath, message: `${e.instancePath || "/"}: ${e.message}` }));
		return [{ path: "", message: String(error.message ?? error) }];
	}
}

const pointerEscape = (key) => String(key).replace(/~/g, "~0").replace(/\//g, "~1");
const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// The Kubernetes schemas do not forbid unknown fields, so a typo ("readinesProbe")
// would validate, and the API server would drop it or refuse it. Find such fields by
// probing: put a value of no JSON type at the field; a field the schema knows (a
// property, or a key of a map such as labels) then fails validation at that path,
// an unknown one does not.
function unknownFields(model, object) {
	const unknown = [];
	const walk = (node, keys) => {
		if (Array.isArray(node)) {
			node.forEach((item, index) => walk(item, [...keys, index]));
			return;
		}
		if (!isPlainObject(node))
			return;
		for (const key of Object.keys(node)) {
			const fieldKeys = [...keys, key];
			const pointer = "/" + fieldKeys.map(pointerEscape).join("/");
			const probe = structuredClone(object);
			let parent = probe;
			for (const k of keys)
				parent = parent[k];
			parent[key] = Symbol("probe");
			const hit = schemaErrors(model, probe).some(
				(e) => e.path === pointer || e.path.startsWith(pointer + "/"));
			if (hit)
				walk(node[key], fieldKeys);
			else
				unknown.push(`${pointer}: not a field of the Kubernetes schema (misspelt or misplaced?)`);
		}
	};
	walk(object, []);
	return unknown;
}

function describe(object) {
	return `${object?.kind ?? "?"} ${object?.metadata?.namespace ?? ""}/${object?.metadata?.name ?? "?"}`;
}

// Schema + unknown fields for one object; returns the problems.
function validateObject(object) {
	const { model, error } = modelFor(object);
	if (error)
		return [error];
	return [...schemaErrors(model, object).map((e) => e.message), ...unknownFields(model, object)];
}

// ---------------------------------------------------------------- policy

const AGENT = "ip-masq-agent";
const SELECTOR = { "k8s-app": AGENT };
// Kubernetes' recommended labels, besides upstream's k8s-app; never in the selector.
const RECOMMENDED_LABELS = { "app.kubernetes.io/name": AGENT, "app.kubernetes.io/component": "node-agent" };
const HEALTH_PORT = 10263; // the agent's default --health-addr, ":10263"

const deepEqual = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// What makes the DaemonSet safe and upstream-compatible. Returns the violations, so
// that a weakened manifest fails with a reason, and so that the self-test below can
// check that every weakening is caught.
function daemonSetPolicy(ds) {
	const v = [];
	const need = (ok, message) => {
		if (!ok)
			v.push(message);
	};
	need(ds?.metadata?.name === AGENT, `metadata.name must be "${AGENT}" (upstream's name)`);
	need(ds?.metadata?.namespace === "kube-system", "metadata.namespace must be kube-system (where upstream's ConfigMap lives)");
	const spec = ds?.spec ?? {};
	need(deepEqual(spec.selector, { matchLabels: SELECTOR }),
	     "spec.selector must be exactly upstream's {matchLabels: {k8s-app: ip-masq-agent}}: a DaemonSet's selector is immutable");
	const strategy = spec.updateStrategy ?? {};
	need(strategy.type === "RollingUpdate", "spec.updateStrategy.type must be RollingUpdate");
	const surge = strategy.rollingUpdate?.maxSurge;
	need(surge === undefined || surge === 0 || surge === "0%",
	     "spec.updateStrategy.rollingUpdate.maxSurge must be 0: two agents on a node would share the health port and the table");
	need(strategy.rollingUpdate?.maxUnavailable !== undefined && strategy.rollingUpdate.maxUnavailable !== "100%",
	     "spec.updateStrategy.rollingUpdate.maxUnavailable must be set, below 100%");

	const template = spec.template ?? {};
	need(template.metadata?.labels?.["k8s-app"] === AGENT, "the pod template must carry the label k8s-app: ip-masq-agent");
	for (const [where, labels] of [["metadata", ds?.metadata?.labels], ["the pod template", template.metadata?.labels]])
		for (const [key, value] of Object.entries(RECOMMENDED_LABELS))
			need(labels?.[key] === value, `${where} must carry the label ${key}: ${value} (docs/kubernetes.md)`);
	const pod = template.spec ?? {};
	need(pod.hostNetwork === true, "hostNetwork must be true: the agent programs the node's nftables");
	need(pod.nodeSelector?.["kubernetes.io/os"] === "linux", "nodeSelector must hold kubernetes.io/os: linux");
	need(pod.priorityClassName === "system-node-critical", "priorityClassName must be system-node-critical");
	need((pod.tolerations ?? []).some((t) => t.operator === "Exists" && t.key === undefined && t.effect === undefined),
	     "tolerations must include {operator: Exists} (no key, no effect): run on every node whatever its taints");
	need(pod.hostPID !== true && pod.hostIPC !== true, "hostPID and hostIPC must stay off");
	need(pod.automountServiceAccountToken === false, "automountServiceAccountToken must be false: the agent never calls the API");
	need(typeof pod.terminationGracePeriodSeconds === "number" && pod.terminationGracePeriodSeconds <= 30,
	     "terminationGracePeriodSeconds must be set and short (at most 30)");
	need(pod.securityContext?.seccompProfile === undefined || pod.securityContext.seccompProfile.type === "RuntimeDefault",
	     "the pod's seccompProfile, if set, must be RuntimeDefault");
	need((pod.initContainers ?? []).length === 0, "no init containers: they would need their own review");

	const containers = pod.containers ?? [];
	need(containers.length === 1 && containers[0]?.name === AGENT,
	     `exactly one container, named "${AGENT}" (upstream's name, used by kubectl set image)`);
	const c = containers[0] ?? {};
	need(typeof c.image === "string" && /:[^/]+$|@sha256:/.test(c.image), "the image must carry a tag or digest");
	need(c.command === undefined, "no command: the image's entrypoint is the agent, args go to it");
	const sc = c.securityContext ?? {};
	need(sc.privileged === false, "securityContext.privileged must be false");
	need(sc.allowPrivilegeEscalation === false, "securityContext.allowPrivilegeEscalation must be false");
	need(sc.readOnlyRootFilesystem === true, "securityContext.readOnlyRootFilesystem must be true: the agent writes nothing");
	need(deepEqual(sc.capabilities?.drop, ["ALL"]), "securityContext.capabilities.drop must be [ALL]");
	need(deepEqual(sc.capabilities?.add, ["NET_ADMIN"]), "securityContext.capabilities.add must be exactly [NET_ADMIN]");
	need(sc.seccompProfile?.type === "RuntimeDefault", "securityContext.seccompProfile.type must be RuntimeDefault");
	need(sc.runAsUser === 0 && sc.runAsNonRoot !== true,
	     "securityContext.runAsUser must be 0: a non-root uid loses NET_ADMIN at exec (no ambient capabilities)");

	const healthPort = (c.ports ?? []).find((p) => p.name === "health");
	need(healthPort?.containerPort === HEALTH_PORT && (healthPort?.protocol ?? "TCP") === "TCP",
	     `a TCP containerPort named "health" must be ${HEALTH_PORT}, the agent's --health-addr`);
	need(healthPort?.hostPort === undefined || healthPort.hostPort === healthPort.containerPort,
	     "with hostNetwork, hostPort must equal containerPort");
	// Liveness is not readiness: a probe that restarts the agent for a bad config throws
	// away the state that keeps the node safe (its last good rules, healed on drift).
	for (const [name, endpoint, why] of [
		["readinessProbe", "/readyz", "ready while the config is valid and the table in force"],
		["livenessProbe", "/livez", "live while the event loop turns; a bad config must never restart the agent"]]) {
		const get = c[name]?.httpGet;
		need(get?.path === endpoint, `${name} must be an httpGet of ${endpoint} (${why})`);
		need(get?.port === "health" || get?.port === HEALTH_PORT, `${name} must use the health port`);
		need(get?.host === undefined && (get?.scheme ?? "HTTP") === "HTTP", `${name} must probe plain HTTP at the pod's (the node's) address`);
	}
	// The kubelet's defaults are a 1 s timeout and 3 failures; spell them out, and
	// leave a sync that takes seconds room before a restart.
	const live = c.livenessProbe ?? {};
	need(Number.isInteger(live.timeoutSeconds) && live.timeoutSeconds >= 2,
	     "livenessProbe.timeoutSeconds must be set, at least 2: a busy node must not make a live agent miss its probe");
	need(Number.isInteger(live.periodSeconds) && Number.isInteger(live.failureThreshold) &&
	     live.failureThreshold >= 2 && live.periodSeconds * live.failureThreshold >= 20,
	     "livenessProbe must fail at least twice and for at least 20 s (periodSeconds x failureThreshold) before a restart: one slow answer is not a hang");

	const res = c.resources ?? {};
	need(res.requests?.cpu !== undefined && res.requests?.memory !== undefined, "resources.requests must set cpu and memory");
	need(res.limits?.memory !== undefined, "resources.limits.memory must be set");

	const mounts = (c.volumeMounts ?? []).filter((m) => m.name === "config");
	need(mounts.length === 1 && mounts[0].mountPath === "/etc/config",
	     "the config volume must be mounted once, at /etc/config (upstream's path)");
	need(mounts.every((m) => m.readOnly === true), "the config mount must be readOnly");
	need(mounts.every((m) => m.subPath === undefined && m.subPathExpr === undefined),
	     "the config mount must not use subPath: a subPath mount never sees ConfigMap updates");
	const volume = (pod.volumes ?? []).find((vol) => vol.name === "config");
	const cm = volume?.configMap;
	need(cm?.name === AGENT, `the config volume must be the ConfigMap "${AGENT}" (upstream's name)`);
	need(cm?.optional === true, "the config volume must be optional: without the ConfigMap the agent runs with defaults");
	need(deepEqual(cm?.items, [{ key: "config", path: AGENT }]),
	     "the config volume must map key config to path ip-masq-agent (/etc/config/ip-masq-agent, as upstream)");
	return v;
}

const CONFIG_KEYS = ["nonMasqueradeCIDRs", "cidrLimit", "masqLinkLocal", "masqLinkLocalIPv6", "resyncInterval"];

function configMapPolicy(cm) {
	const v = [];
	if (cm?.metadata?.name !== AGENT || cm?.metadata?.namespace !== "kube-system")
		v.push("the ConfigMap must be kube-system/ip-masq-agent, the one the DaemonSet mounts (upstream's)");
	if (!deepEqual(Object.keys(cm?.data ?? {}), ["config"]))
		v.push("the ConfigMap must hold exactly one key, config (upstream's)");
	if (typeof cm?.data?.config === "string") {
		const parsed = YAML.parseDocument(cm.data.config, { uniqueKeys: true });
		const config = parsed.toJS();
		if (parsed.errors.length > 0 || !isPlainObject(config))
			v.push(`data.config must be a YAML mapping: ${parsed.errors.map((e) => e.message).join("; ")}`);
		else
			for (const key of ["nonMasqueradeCIDRs", "masqLinkLocal", "resyncInterval"])
				if (!(key in config))
					v.push(`the example config should show upstream's key ${key}`);
		for (const key of Object.keys(isPlainObject(config) ? config : {}))
			if (!CONFIG_KEYS.includes(key))
				v.push(`data.config: unknown key ${key} (known: ${CONFIG_KEYS.join(", ")})`);
	}
	return v;
}

// Weakening the DaemonSet in any of these ways must be caught.
const WEAKENINGS = {
	"privileged: true": (ds) => { ds.spec.template.spec.containers[0].securityContext.privileged = true; },
	"SYS_ADMIN added": (ds) => { ds.spec.template.spec.containers[0].securityContext.capabilities.add.push("SYS_ADMIN"); },
	"capabilities not dropped": (ds) => { delete ds.spec.template.spec.containers[0].securityContext.capabilities.drop; },
	"privilege escalation allowed": (ds) => { ds.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation = true; },
	"writable root filesystem": (ds) => { ds.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem = false; },
	"seccomp Unconfined": (ds) => { ds.spec.template.spec.containers[0].securityContext.seccompProfile = { type: "Unconfined" }; },
	"runAsNonRoot": (ds) => { Object.assign(ds.spec.template.spec.containers[0].securityContext, { runAsUser: 65534, runAsNonRoot: true }); },
	"no priority class": (ds) => { delete ds.spec.template.spec.priorityClassName; },
	"tolerations narrowed": (ds) => { ds.spec.template.spec.tolerations = [{ operator: "Exists", effect: "NoSchedule" }]; },
	"readiness on /": (ds) => { ds.spec.template.spec.containers[0].readinessProbe.httpGet.path = "/"; },
	"readiness on /livez": (ds) => { ds.spec.template.spec.containers[0].readinessProbe.httpGet.path = "/livez"; },
	"no liveness probe": (ds) => { delete ds.spec.template.spec.containers[0].livenessProbe; },
	"liveness on /healthz": (ds) => { ds.spec.template.spec.containers[0].livenessProbe.httpGet.path = "/healthz"; },
	"liveness on /readyz": (ds) => { ds.spec.template.spec.containers[0].livenessProbe.httpGet.path = "/readyz"; },
	"liveness on a hair trigger": (ds) => { Object.assign(ds.spec.template.spec.containers[0].livenessProbe, { periodSeconds: 1, failureThreshold: 1 }); },
	"liveness with the kubelet's 1 s timeout": (ds) => { delete ds.spec.template.spec.containers[0].livenessProbe.timeoutSeconds; },
	"config via subPath": (ds) => { ds.spec.template.spec.containers[0].volumeMounts[0].subPath = AGENT; },
	"ConfigMap required": (ds) => { ds.spec.template.spec.volumes[0].configMap.optional = false; },
	"pod network": (ds) => { ds.spec.template.spec.hostNetwork = false; },
	"any OS": (ds) => { delete ds.spec.template.spec.nodeSelector; },
	"OnDelete": (ds) => { ds.spec.updateStrategy = { type: "OnDelete" }; },
	"selector changed": (ds) => { ds.spec.selector.matchLabels["app.kubernetes.io/name"] = AGENT; },
	"recommended label dropped from the pod template": (ds) => { delete ds.spec.template.metadata.labels["app.kubernetes.io/name"]; },
	"mount moved": (ds) => { ds.spec.template.spec.containers[0].volumeMounts[0].mountPath = "/config"; },
	"no memory limit": (ds) => { delete ds.spec.template.spec.containers[0].resources.limits; },
};

// ---------------------------------------------------------------- kustomization

function kustomizationChecks(dir, kustomization, objectsByFile) {
	const v = [];
	if (kustomization?.apiVersion !== "kustomize.config.k8s.io/v1beta1" || kustomization?.kind !== "Kustomization")
		v.push("apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization");
	if (kustomization?.namespace !== "kube-system")
		v.push("namespace must be kube-system");
	const resources = kustomization?.resources;
	if (!Array.isArray(resources) || resources.length === 0)
		v.push("resources must be a non-empty list");
	for (const resource of resources ?? []) {
		const target = path.resolve(dir, String(resource));
		if (!fs.existsSync(target))
			v.push(`resource ${resource} does not exist`);
		else if (fs.statSync(target).isDirectory() && !fs.existsSync(path.join(target, "kustomization.yaml")))
			v.push(`resource ${resource} is a directory without a kustomization.yaml`);
	}
	if (!(resources ?? []).includes("daemonset.yaml"))
		v.push("resources must list daemonset.yaml");
	if ((resources ?? []).includes("configmap.yaml"))
		v.push("resources must not list configmap.yaml: `kubectl apply -k` would overwrite the config already in the cluster");
	if ("commonLabels" in (kustomization ?? {}))
		v.push("commonLabels rewrites the DaemonSet's immutable selector: write labels in daemonset.yaml");
	// Debian 12's kubectl (1.20, kustomize v2.0.3) refuses the whole kustomization for
	// a `labels` field ("json: unknown field"); the labels live in daemonset.yaml.
	if ("labels" in (kustomization ?? {}))
		v.push("labels needs kustomize v4.1 (kubectl 1.22): kubectl 1.21 and older refuse the kustomization; write labels in daemonset.yaml");

	const images = new Set();
	for (const resource of resources ?? [])
		for (const object of objectsByFile.get(path.resolve(dir, String(resource))) ?? [])
			for (const c of object?.spec?.template?.spec?.containers ?? [])
				images.add(String(c.image).replace(/@sha256:.*$/, "").replace(/:[^/:]+$/, ""));
	const entries = kustomization?.images ?? [];
	if (entries.length === 0)
		v.push("images must have an entry: it pins the tag, which an overlay's images entry replaces");
	for (const entry of entries) {
		if (!images.has(entry.name))
			v.push(`images: ${entry.name} matches no container image (${[...images].join(", ")}): kustomize would ignore it`);
		if (args.version && entry.newTag !== undefined && entry.newTag !== `v${args.version}`)
			v.push(`images: newTag ${entry.newTag} is not the project's version v${args.version}`);
	}
	return v;
}

// One patch of a component: a strategic merge patch (a DaemonSet) or a JSON patch (a list
// of operations); either leaves the immutable selector alone.
function componentPatchChecks(where, text) {
	const v = [];
	const doc = YAML.parseDocument(text, { version: "1.1", uniqueKeys: true });
	v.push(...doc.errors.map((e) => `${where}.patch: ${e.message}`));
	const patch = doc.toJS();
	if (Array.isArray(patch)) {
		for (const [i, op] of patch.entries()) {
			if (!["add", "remove", "replace", "test"].includes(op?.op) || typeof op?.path !== "string")
				v.push(`${where}.patch[${i}] must be a JSON patch operation (add, remove, replace, test) with a path`);
			else if (op.path.startsWith("/spec/selector"))
				v.push(`${where}.patch[${i}] must not touch spec.selector: it is immutable`);
		}
		return v;
	}
	if (patch?.kind !== "DaemonSet" || patch?.metadata?.name !== AGENT)
		v.push(`${where}.patch must be a DaemonSet named ${AGENT}, or a JSON patch`);
	if (patch?.spec?.selector !== undefined)
		v.push(`${where}.patch must not touch spec.selector: it is immutable`);
	for (const [key, value] of Object.entries(patch?.spec?.template?.spec?.nodeSelector ?? {}))
		if (typeof value !== "string")
			v.push(`${where}.patch: nodeSelector ${key} must be a string (quote it), not ${JSON.stringify(value)}`);
	return v;
}

// A component's generated ConfigMaps: each file entry ("KEY=FILE") names a file beside
// the component. Returns [{ name, key, file }].
function componentConfigFiles(componentDir, component, v) {
	const out = [];
	for (const generator of component?.configMapGenerator ?? []) {
		if (generator?.namespace !== "kube-system")
			v.push(`configMapGenerator ${generator?.name}: namespace must be kube-system, the DaemonSet's`);
		for (const entry of generator?.files ?? []) {
			const [key, file] = String(entry).includes("=") ? String(entry).split("=", 2) : [path.basename(String(entry)), String(entry)];
			const full = path.join(componentDir, file);
			if (!fs.existsSync(full))
				v.push(`configMapGenerator ${generator?.name}: ${file} does not exist`);
			else
				out.push({ name: generator.name, key, file: full });
		}
	}
	return out;
}

// manifests/components/*: kustomize components an overlay may add. Without kubectl
// (kustomize.mjs renders them where there is one), at least: each is a Component whose
// patches target the DaemonSet, leave its immutable selector alone, and give the
// nodeSelector string values (a bare YAML true is a boolean the API server refuses);
// the files of its ConfigMaps exist (the agent reads them below).
function componentChecks(dir) {
	const results = [];
	const componentsDir = path.join(dir, "components");
	if (!fs.existsSync(componentsDir))
		return results;
	for (const name of fs.readdirSync(componentsDir).sort()) {
		const v = [];
		const file = path.join(componentsDir, name, "kustomization.yaml");
		if (!fs.existsSync(file)) {
			results.push([name, [`${file} is missing`]]);
			continue;
		}
		const { objects, problems } = parseYamlFile(file);
		v.push(...problems);
		const component = objects[0];
		if (component?.apiVersion !== "kustomize.config.k8s.io/v1alpha1" || component?.kind !== "Component")
			v.push("apiVersion/kind must be kustomize.config.k8s.io/v1alpha1 Component");
		const patches = component?.patches ?? [];
		if (!Array.isArray(patches) || patches.length === 0)
			v.push("patches must be a non-empty list");
		for (const [index, entry] of (Array.isArray(patches) ? patches : []).entries()) {
			const where = `patches[${index}]`;
			if (entry?.target?.kind !== "DaemonSet" || entry?.target?.name !== AGENT)
				v.push(`${where}.target must name the DaemonSet ${AGENT}`);
			if (typeof entry?.patch !== "string")
				v.push(`${where}.patch must be an inline patch`);
			else
				v.push(...componentPatchChecks(where, entry.patch));
		}
		const configs = componentConfigFiles(path.join(componentsDir, name), component, v);
		results.push([name, v, configs]);
	}
	return results;
}

// ---------------------------------------------------------------- the agent

function runAgent(agent, agentArgs) {
	return spawnSync(agent, agentArgs, { encoding: "utf8", timeout: 60000 });
}

// The agent's own parser on the example config and on the DaemonSet's args, with the
// ConfigMap present and absent (it is optional).
function agentChecks(agent, ds, cm) {
	const v = [];
	const containerArgs = ds?.spec?.template?.spec?.containers?.[0]?.args ?? [];
	const configFile = path.join(args.work, "configmap-config.yaml");
	fs.writeFileSync(configFile, cm?.data?.config ?? "");
	const missing = path.join(args.work, "no-such-dir", "ip-masq-agent");
	for (const [label, config] of [["with the example ConfigMap", configFile], ["without a ConfigMap", missing]]) {
		const run = runAgent(agent, [...containerArgs, `--config=${config}`, "--dry-run"]);
		if (run.status !== 0)
			v.push(`${label}: ip-masq-agent ${containerArgs.join(" ")} --dry-run exited ${run.status}: ${run.stderr.trim()}`);
		else if (/ (warning|error): /.test(run.stderr))
			v.push(`${label}: the agent warned: ${run.stderr.trim()}`);
		else if (!/^table inet /m.test(run.stdout))
			v.push(`${label}: the dry run printed no table`);
	}
	return v;
}

// A component's ConfigMap files, each under its key's name in a directory, as the projected
// volume lays them out: the agent's dry run with the DaemonSet's args and --config-dir,
// strict, takes them without an error or a warning.
function componentAgentChecks(agent, ds, name, configs) {
	const v = [];
	const dir = fs.mkdtempSync(path.join(args.work, `component-${name}-`));
	try {
		for (const { key, file } of configs)
			fs.copyFileSync(file, path.join(dir, key));
		const containerArgs = ds?.spec?.template?.spec?.containers?.[0]?.args ?? [];
		const run = runAgent(agent, [...containerArgs, `--config-dir=${dir}`, "--strict-config", "--dry-run"]);
		if (run.status !== 0)
			v.push(`ip-masq-agent --config-dir --strict-config --dry-run exited ${run.status}: ${run.stderr.trim()}`);
		else if (/ (warning|error): /.test(run.stderr))
			v.push(`the agent warned: ${run.stderr.trim()}`);
		else if (!/^table inet /m.test(run.stdout))
			v.push("the dry run printed no table");
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
	}
	return v;
}

// What the manifest and docs/kubernetes.md say the agent does without the ConfigMap is what
// the DaemonSet's args make it do: with --nomasq-all-reserved-ranges, every reserved IPv4
// range is in its set, and both texts name the flag ("its defaults" alone misled).
function noConfigMapClaims(agent, ds, manifestsDir) {
	const v = [];
	const containerArgs = ds?.spec?.template?.spec?.containers?.[0]?.args ?? [];
	if (!containerArgs.includes("--nomasq-all-reserved-ranges"))
		return ["the DaemonSet no longer passes --nomasq-all-reserved-ranges: update this check and the texts it reads"];
	const missing = path.join(args.work, "no-such-dir", "ip-masq-agent");
	const run = runAgent(agent, [...containerArgs, `--config=${missing}`, "--dry-run"]);
	for (const range of ["10.0.0.0/8", "100.64.0.0/10", "192.0.2.0/24", "240.0.0.0/4"])
		if (!run.stdout?.includes(range))
			v.push(`without a ConfigMap the dry run's set lacks ${range}`);
	const manifest = fs.readFileSync(path.join(manifestsDir, "daemonset.yaml"), "utf8");
	const optional = manifest.split("\n").findIndex((line) => /^\s*optional: true/.test(line));
	const comment = manifest.split("\n").slice(Math.max(0, optional - 4), optional).join("\n");
	if (!comment.includes("--nomasq-all-reserved-ranges"))
		v.push(`daemonset.yaml, above the ConfigMap's optional: true, must say what the agent runs without it (naming --nomasq-all-reserved-ranges), says:\n${comment}`);
	const docs = path.join(manifestsDir, "..", "docs", "kubernetes.md");
	const deploying = fs.readFileSync(docs, "utf8").split("## Deploying")[1]?.split("\n## ")[0] ?? "";
	const line = deploying.split("\n").findIndex((l) => l.includes("The config (optional"));
	if (line < 0 || !deploying.split("\n").slice(line, line + 3).join(" ").includes("--nomasq-all-reserved-ranges"))
		v.push("docs/kubernetes.md, Deploying: the config step must say what the agent runs without it, naming --nomasq-all-reserved-ranges");
	return v;
}

// The base's image is a placeholder that no registry serves: the manifest says so at the
// image line, and how to replace it.
function placeholderImageCheck(manifestsDir) {
	const lines = fs.readFileSync(path.join(manifestsDir, "daemonset.yaml"), "utf8").split("\n");
	const at = lines.findIndex((line) => /^\s*image: /.test(line));
	const above = [];
	for (let i = at - 1; i >= 0 && /^\s*#/.test(lines[i]); i--)
		above.unshift(lines[i]);
	const comment = above.join("\n");
	return /PLACEHOLDER/.test(comment) && comment.includes("container/build-image.sh") && comment.includes("images:")
		? [] : [`the comment above the image line must say it is a PLACEHOLDER to replace (container/build-image.sh, an overlay's images:), says:\n${comment}`];
}

// The agent's default --health-addr port, or the one the DaemonSet gives, must be the probes'
// port. A --help that does not show the flag is a problem, not a check left out.
function healthPortCheck(agent, ds) {
	const help = runAgent(agent, ["--help"]);
	const match = /--health-addr arg \(=([^)]*)\)/.exec(help.stdout ?? "");
	if (!match)
		return { problems: ["the agent's --help shows no --health-addr with its default: the probes' port cannot be checked"] };
	const containerArgs = ds?.spec?.template?.spec?.containers?.[0]?.args ?? [];
	const given = containerArgs.map((a) => /^--?health-addr=(.*)$/.exec(a)).find(Boolean);
	const address = given ? given[1] : match[1];
	const port = Number(/:(\d+)$/.exec(address)?.[1]);
	return port === HEALTH_PORT ? { problems: [] }
		: { problems: [`the agent serves health on "${address}", the manifest probes port ${HEALTH_PORT}`] };
}

// ---------------------------------------------------------------- main

const started = Date.now();
const manifestsDir = path.resolve(args.manifests);
const files = fs.readdirSync(manifestsDir).filter((f) => /\.ya?ml$/.test(f)).sort();
const objectsByFile = new Map();
let kustomization = null;

for (const name of ["daemonset.yaml", "configmap.yaml", "kustomization.yaml"])
	check(`manifests/${name} exists`, files.includes(name) ? [] : [`${name} is missing`]);

for (const file of files) {
	const full = path.join(manifestsDir, file);
	const { objects, problems } = parseYamlFile(full);
	if (!check(`manifests/${file} parses as YAML`, problems))
		continue;
	if (file === "kustomization.yaml") {
		kustomization = objects[0];
		continue;
	}
	objectsByFile.set(full, objects);
	check(`manifests/${file} holds Kubernetes objects`, objects.length > 0 ? [] : ["no documents"]);
	for (const object of objects)
		check(`manifests/${file}: ${describe(object)} matches the Kubernetes schema, no unknown fields`,
		      validateObject(object));
}

const all = [...objectsByFile.values()].flat();
const daemonSets = all.filter((o) => o?.kind === "DaemonSet");
const configMaps = all.filter((o) => o?.kind === "ConfigMap");
check("exactly one DaemonSet and one ConfigMap", daemonSets.length === 1 && configMaps.length === 1
	? [] : [`found ${daemonSets.length} DaemonSet(s) and ${configMaps.length} ConfigMap(s)`]);
const ds = daemonSets[0];
const cm = configMaps[0];

check("DaemonSet: security and compatibility policy", daemonSetPolicy(ds));
if (args.version)
	check(`DaemonSet: the image's tag is the project's version v${args.version}`,
	      String(ds?.spec?.template?.spec?.containers?.[0]?.image).endsWith(`:v${args.version}`)
		      ? [] : [`image ${ds?.spec?.template?.spec?.containers?.[0]?.image}`]);
check("ConfigMap: upstream's name and key, a valid example config", configMapPolicy(cm));
check("DaemonSet: the image line says the image is a placeholder to replace, and how", placeholderImageCheck(manifestsDir));

// Test the test: every weakening must be reported, and a misspelt field must be found.
if (ds) {
	const missed = [];
	for (const [name, weaken] of Object.entries(WEAKENINGS)) {
		const copy = structuredClone(ds);
		try {
			weaken(copy);
		} catch (error) {
			missed.push(`${name}: cannot apply to this manifest (${error.message}); update WEAKENINGS`);
			continue;
		}
		if (daemonSetPolicy(copy).length === 0)
			missed.push(`${name}: the policy did not notice`);
	}
	const typo = structuredClone(ds);
	typo.spec.template.spec.containers[0].readinesProbe = typo.spec.template.spec.containers[0].readinessProbe;
	if (!validateObject(typo).some((p) => p.includes("readinesProbe")))
		missed.push("a misspelt field (readinesProbe) was not reported");
	check(`self-test: ${Object.keys(WEAKENINGS).length} weakenings of the DaemonSet and a misspelt field are all caught`, missed);
}

if (kustomization) {
	check("kustomization.yaml: namespace, resources exist, images entry, no label transformers",
	      kustomizationChecks(manifestsDir, kustomization, objectsByFile));
	const kubectl = process.env.KUBECTL || "kubectl";
	const env = offlineEnv(args.work);
	const version = kubectlVersion(kubectl, env);
	if (version.missing || version.error) {
		console.log(`# ${version.error ?? "kubectl not found"}: the rendered kustomization is not checked`);
	} else {
		const built = kustomizeBuild(kubectl, env, YAML, manifestsDir);
		const problems = built.error ? [built.error] : [];
		for (const object of built.objects ?? []) {
			problems.push(...validateObject(object).map((p) => `${describe(object)}: ${p}`));
			if (object.kind === "DaemonSet")
				problems.push(...daemonSetPolicy(object));
		}
		check(`kubectl ${version.gitVersion} kustomize manifests/: valid objects, policy intact`, problems);
		// What users do with it (an overlay with images:, the opt-in component) is
		// rendered and checked by kustomize.mjs, with any kubectl.
	}
}

const components = componentChecks(manifestsDir);
for (const [name, problems] of components)
	check(`manifests/components/${name}: a Component patching the DaemonSet, selector untouched, string node labels`, problems);

if (args.agent) {
	check("the agent accepts the DaemonSet's args and the example config (and runs without it)",
	      agentChecks(args.agent, ds, cm));
	for (const [name, , configs] of components)
		if (configs.length > 0)
			check(`manifests/components/${name}: the agent reads its config with --config-dir and --strict-config`,
			      componentAgentChecks(args.agent, ds, name, configs));
	check("without the ConfigMap: the reserved ranges are not masqueraded, as daemonset.yaml and docs/kubernetes.md say",
	      noConfigMapClaims(args.agent, ds, manifestsDir));
	check("the probes' port is the agent's --health-addr port", healthPortCheck(args.agent, ds).problems);
} else {
	console.log("# no --agent given: the agent's own checks of args and config are skipped");
}

console.log(`# ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
