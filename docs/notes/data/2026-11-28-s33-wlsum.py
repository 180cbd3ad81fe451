import json, sys
d = json.load(open(sys.argv[1]))
print(d["device"]["name"], d["verdict"])
for c in d["claims"]:
    print(f"- {c['claim'][:70]} | {c['ratio']:.3f} | {c['verdict']}\n    {c['measured'][:400]}")
