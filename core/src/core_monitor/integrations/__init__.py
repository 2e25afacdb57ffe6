"""Framework integrations: each module connects one training framework to ``Monitor``.

=======================================  ======================================================
module                                   what it gives
=======================================  ======================================================
``core_monitor.integrations.deepspeed``  ``initialize(...)``, a drop-in for
                                         ``deepspeed.initialize``; ``attach(engine)``;
                                         ``monitor_from_ds_config(config)``
``core_monitor.integrations.accelerate`` ``MonitorTracker``, a ``GeneralTracker``; ``register()``
``core_monitor.integrations.lightning``  ``MonitorLogger``, a Lightning ``Logger``
``core_monitor.integrations.transformers`` ``MonitorCallback``, a ``TrainerCallback``
``core_monitor.integrations.step_time``  ``StepClock``: per-rank step times (``step_time=``)
=======================================  ======================================================

Importing this package imports no framework; each module imports its framework when that
module itself is imported (``pip install "core-monitor[deepspeed]"`` etc. install them).
"""
