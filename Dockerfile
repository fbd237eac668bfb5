# The worker image for Dataflow (--sdk_container_image) and portable runners (--environment_config): Beam's own
# Python 3.11 SDK image (its /opt/apache/beam/boot entry point, Beam 2.77 and numpy already installed) plus
# bertprep and the few libraries its pipelines import. Build it from the repository root:
#
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/bertprep-worker:0.1.0 .
#   docker push REGION-docker.pkg.dev/PROJECT/REPO/bertprep-worker:0.1.0
#   bertprep prepare ... --preset dataflow --gcs-bucket gs://B --project PROJECT \
#       --sdk_container_image=REGION-docker.pkg.dev/PROJECT/REPO/bertprep-worker:0.1.0
#
# The launcher must run the same Python minor version (3.11) and Beam version (2.77.0) as the image.
# With --sdk_container_image the dataflow preset's --setup_file is dropped: workers start without pip installs.
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /tmp/bertprep
# Only what the package is built from (no .venv, no outputs), so the build context stays small with BuildKit.
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY corpora ./corpora
COPY beam_options ./beam_options
COPY model ./model

# The pipelines never import torch, tensorboard or matplotlib (trainer-only): install the package without
# dependencies, then exactly the dependencies pyproject.toml pins, less those three. Its apache-beam==2.77.0
# is the image's own: pip keeps it and resolves the rest (numpy) against it.
RUN pip install --no-cache-dir --no-deps . \
 && python -c "import tomllib, re; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
skip = {'torch', 'tensorboard', 'matplotlib'}; \
print('\n'.join(d for d in deps if re.split(r'[ <>=!~\[;]', d, maxsplit=1)[0].lower() not in skip))" \
    > /tmp/worker-requirements.txt \
 && pip install --no-cache-dir -r /tmp/worker-requirements.txt \
 && cd / && rm -rf /tmp/bertprep /tmp/worker-requirements.txt \
 && python -c "import sys, pipeline.commands.run, corpora.wikipedia, corpora.books, corpora.text; \
assert 'torch' not in sys.modules and not pipeline.commands.run.__file__.startswith('/tmp/')"

WORKDIR /
# ENTRYPOINT stays the base image's /opt/apache/beam/boot, which Dataflow and the portable runners start.
