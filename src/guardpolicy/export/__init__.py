"""Export a guard checkpoint for plain transformers (`guardpolicy export`, stage export@): `folder` builds the
exported folder and its model card; `shipped` is the code copied into it."""
