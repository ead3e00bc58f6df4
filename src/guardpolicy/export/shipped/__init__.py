"""The code shipped inside an exported guard folder (``guardpolicy export``, guardpolicy.export.folder).

`configuration_guardpolicy` and `modeling_guardpolicy` are copied byte for byte into every export and named
by its config's ``auto_map``, so ``AutoModelForSequenceClassification.from_pretrained(folder,
trust_remote_code=True)`` loads the guard with plain transformers. They import torch and transformers only
(never guardpolicy), and must keep doing so: the exported folder is for users who do not install this
package. The export itself loads the written folder back through these very classes before it appears.
"""
